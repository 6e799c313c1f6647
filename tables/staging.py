"""Each partition's open-transaction writes, and the committed values that transaction read.

``staged[p]`` maps key -> value (None: delete), one entry per key, in first-write order: the
transaction's changelog records. ``read[p]`` caches committed values read during the open
transaction; nothing else writes a partition's database while its transaction is open, so they
stay true until the next write or discard: the commit's own write uses them (the index upkeep
needs the values it replaces) and then forgets them (:meth:`forget_reads`). With a key
``encode`` (a store whose keys have a compact disk form), ``disk[p]`` keeps the disk form of
every key read, so the commit's write does not encode them again. ``encode`` takes a list of keys
and gives their disk forms: a restore's batch of UUIDs is encoded in whole-list steps."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from rocksdict import Rdict

from tables.rocks import multi_get
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tables.written_keys import WrittenKeys


class Staging:
    """The staged writes and read cache of every partition of one store."""

    __slots__ = ("_encode", "disk", "read", "staged")

    def __init__(self, encode: Callable[[list[bytes]], list[bytes]] | None = None) -> None:
        """``encode``: the disk forms of a list of keys, for the reads (None: keys are stored as
        written)."""
        self._encode = encode
        self.disk: dict[int, dict[bytes, bytes]] = {}
        self.staged: dict[int, dict[bytes, bytes | None]] = {}
        self.read: dict[int, dict[bytes, bytes | None]] = {}

    def stage(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Stage a write (None: delete) in ``partition``'s open transaction."""
        staged = self.staged.get(partition)
        if staged is None:
            staged = self.staged[partition] = {}
        staged[key] = value

    def value(
        self, partition: int, key: bytes, load: Callable[[int, bytes], bytes | None]
    ) -> bytes | None:
        """``key``'s value in ``partition``: the open transaction's staged write, else the
        committed value, loaded by ``load(partition, key)`` once per transaction (or prefetched)
        and kept until :meth:`forget_reads`."""
        staged = self.staged.get(partition)
        if staged is not None and key in staged:
            return staged[key]
        read = self.read.get(partition)
        if read is None:
            read = self.read[partition] = {}
        elif key in read:
            return read[key]
        value = read[key] = load(partition, key)
        return value

    def take(self, partition: int) -> dict[bytes, bytes | None] | None:
        """Remove and return ``partition``'s staged writes (None: none were staged). The cached
        reads stay until the write that applies them calls :meth:`forget_reads`."""
        return self.staged.pop(partition, None)

    def forget_reads(self, partition: int) -> None:
        """The committed values are about to change: drop what was read of them."""
        self.read.pop(partition, None)
        self.disk.pop(partition, None)

    def discard(self, partition: int) -> None:
        self.staged.pop(partition, None)
        self.forget_reads(partition)

    def changelog_records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        """The staged writes, one per key (the source-offsets record is not among them: the
        transaction layer sends it itself)."""
        staged = self.staged.get(partition)
        if not staged:
            return []
        return [(k, v) for k, v in staged.items() if k != SOURCE_OFFSETS_KEY]

    def count(self, partition: int) -> int:
        return len(self.staged.get(partition, ()))

    def unfinished(self) -> Iterator[tuple[int, int]]:
        """(partition, staged writes) of every partition with an open transaction's writes."""
        return ((p, len(s)) for p, s in self.staged.items() if s)

    def prefetch(self, partition: int, keys: list[bytes], db: Callable[[], Rdict]) -> None:
        """Read the committed values of ``keys`` not read or staged yet, with one multi-get."""
        read = self.read.setdefault(partition, {})
        staged = self.staged.get(partition, {})
        todo = [k for k in keys if k not in read and k not in staged]
        if todo:
            on_disk = self._on_disk(todo)
            read.update(zip(todo, multi_get(db(), on_disk), strict=True))
            if on_disk is not todo:
                self.disk.setdefault(partition, {}).update(zip(todo, on_disk, strict=True))

    def committed(
        self,
        partition: int,
        keys: list[bytes],
        db: Callable[[], Rdict],
        written: WrittenKeys | None = None,
    ) -> tuple[list[bytes], list[bytes | None]]:
        """The disk form and the committed value (None: absent) of each of ``keys``: values
        from what the open transaction read already, the rest with one multi-get; disk forms
        from the prefetch when it read every key, else encoded here. ``written``: the keys a
        restore into an empty database wrote so far; ``keys`` are added to it, and only those
        it may hold already are read."""
        read = self.read.get(partition)
        if not read:  # nothing read in this transaction (a restore's batch): one multi-get
            on_disk = self._on_disk(keys)
            if written is None:
                return on_disk, multi_get(db(), on_disk)
            values: list[bytes | None] = [None] * len(keys)
            maybe = written.mark(keys)  # as written: their hashes are known already
            if maybe:
                fetched = multi_get(db(), [on_disk[i] for i in maybe])
                for i, value in zip(maybe, fetched, strict=True):
                    values[i] = value
            return on_disk, values
        encode = self._encode
        if encode is None:
            on_disk = keys
        else:
            disk = self.disk.get(partition, {})
            try:
                on_disk = [disk[k] for k in keys]  # every key read in this transaction
            except KeyError:
                on_disk = encode(keys)
        if written is not None:
            written.mark(keys)  # every key is read below
        values = [read.get(k) for k in keys]
        missing = [i for i, k in enumerate(keys) if k not in read]
        if missing:
            fetched = multi_get(db(), [on_disk[i] for i in missing])
            for i, value in zip(missing, fetched, strict=True):
                values[i] = value
        return on_disk, values

    def _on_disk(self, keys: list[bytes]) -> list[bytes]:
        encode = self._encode
        return keys if encode is None else encode(keys)
