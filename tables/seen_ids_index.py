"""The local age-out index of ``seen_ids`` and its per-partition summary, kept by the store.

Each partition's database keeps a secondary index (its own column family, derived from the
table's writes in the same atomic batch at each commit, never replicated: a rebuild from the
changelog derives it again) keyed by (time bucket of the first sighting, insertion sequence),
and a summary (ids held, next sequence, newest first sighting, seek hint) in the bookkeeping
family. Age-out (``tables/seen_ids.py``) walks the index from the hint, oldest first.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

from rocksdict import WriteBatch

from tables import key_migration
from tables import keys as key_forms
from tables.rocks import PartitionDB
from tables.store import TransactionalStore
from tables.window import FIRST_SEEN, SEQ, SIGHTING, index_key_of, index_keys_of

#: Column family of the local age-out index: index key -> the id's key (in its disk form).
INDEX_CF = "dedupe-age-index"
#: Key (in META_CF) of the partition's summary: ids held, next sequence, newest first sighting,
#: seek hint.
SUMMARY_KEY = b"seen-ids-summary"
#: Greater than every index key (those are 16 bytes): no index entry put yet.
_ABOVE_EVERY_INDEX_KEY = b"\xff" * 17
#: Writes of new ids from this many on take the whole-array path of :meth:`extend_batch`
#: (below it, its fixed cost outweighs the per-id work it saves).
FRESH_IN_BULK = 256


@dataclass
class Summary:
    """Per partition, derived from the ids held (kept in the store's bookkeeping family)."""

    held: int = 0
    next_seq: int = 0
    newest_ms: int = 0
    #: Every index key below it is gone: age-out starts its walk here.
    hint: bytes = b""

    def encode(self) -> bytes:
        return (
            self.held.to_bytes(8, "big")
            + self.next_seq.to_bytes(8, "big")
            + self.newest_ms.to_bytes(8, "big")
            + self.hint
        )

    @classmethod
    def decode(cls, raw: bytes | None) -> Summary:
        if raw is None:
            return cls()
        return cls(
            int.from_bytes(raw[0:8], "big"),
            int.from_bytes(raw[8:16], "big"),
            int.from_bytes(raw[16:24], "big"),
            raw[24:],
        )


class SeenIdsStore(TransactionalStore):
    """The transactional store plus the local age-out index and per-partition summary. Keys
    are on disk in their compact form (``tables/keys.py``), in the ids and in the index."""

    extra_cfs = (INDEX_CF,)
    key_format = key_forms.FORMAT
    disk_key = staticmethod(key_forms.to_disk)
    disk_keys = staticmethod(key_forms.to_disk_all)
    written_key = staticmethod(key_forms.from_disk)

    @staticmethod
    def convert_keys(pdb: PartitionDB, found: int, name: str) -> int | None:
        return key_migration.convert(pdb, found, INDEX_CF, name)

    def __init__(self, *args: Any, bucket_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bucket_ms = bucket_ms
        self._summaries: dict[int, Summary] = {}
        self._pending_hints: dict[int, bytes] = {}
        self._pending_unindex: dict[int, list[bytes]] = {}

    def summary(self, partition: int) -> Summary:
        """The committed summary of ``partition``."""
        summary = self._summaries.get(partition)
        if summary is None:
            raw = self.partition_db(partition).meta.get(SUMMARY_KEY)
            summary = self._summaries[partition] = Summary.decode(raw)
        return summary

    def stage_hint(self, partition: int, hint: bytes) -> None:
        """Age-out moved the seek hint; it is stored with the partition's next commit."""
        self._pending_hints[partition] = hint

    def stage_unindex(self, partition: int, index_key: bytes) -> None:
        """Age-out passed an index entry written under another bucket width (the window or
        DEDUPE_BUCKET changed since): it is deleted, by its own key, with the next commit (the
        write path derives keys from the current width, so it cannot name this one)."""
        self._pending_unindex.setdefault(partition, []).append(index_key)

    def index(self, partition: int, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed index entries ``(index key, the id's key as written)`` from ``start`` on."""
        it = self.partition_db(partition).extra[INDEX_CF].iter()
        it.seek(start)
        written_key = self.written_key
        while it.valid():
            yield it.key(), written_key(it.value())
            it.next()

    def extend_batch(
        self,
        partition: int,
        pdb: PartitionDB,
        batch: WriteBatch,
        writes: list[tuple[bytes, bytes | None]],
    ) -> None:
        """Apply id writes and keep the index and summary in step (old entry out, new in; a
        repeat, which changes only the entry's repeat count, leaves both as they are).

        Each key's last write is applied against its committed value: the ids and the index
        end as after every write in order (a restore's batch can hold several records of one
        key; a commit holds one per key).

        It runs for every id a commit or a restore writes, so it works on the encoded entries'
        bytes: the first sighting and the sequence are 8-byte big-endian fields, which compare
        as bytes as their numbers do; an index key is the first sighting's time bucket (kept
        from the last id while the next falls in the same bucket) and the sequence. The summary
        is kept in locals.
        """
        summary = self.summary(partition)
        held = summary.held
        # The greatest sequence and first sighting so far, in their encoded form (b"": none).
        top_seq = (summary.next_seq - 1).to_bytes(8, "big") if summary.next_seq else b""
        newest = summary.newest_ms.to_bytes(8, "big")
        bucket_ms = self.bucket_ms
        bucket = bucket_end = b""  # the last id's bucket: [bucket, bucket_end)
        lowest_put = _ABOVE_EVERY_INDEX_KEY
        handle = pdb.handles[INDEX_CF]
        put, delete = batch.put, batch.delete
        last = dict(writes)
        disk_keys, olds = self.committed(partition, list(last)) if last else ([], [])
        values = list(last.values())
        fresh = None
        if len(values) >= FRESH_IN_BULK and olds.count(None) == len(olds) and None not in values:
            # Every id new (a restore into an empty store, a commit of first sightings): the
            # index keys and the summary's marks in whole-array steps.
            fresh = index_keys_of(cast(list[bytes], values), bucket_ms)
        if fresh is not None:
            for disk_key, new, ik in zip(disk_keys, values, fresh.keys, strict=True):
                put(disk_key, new)
                put(ik, disk_key, handle)
            held += len(values)
            top_seq = max(top_seq, fresh.top_seq)
            newest = max(newest, fresh.newest)
            lowest_put = fresh.lowest
            values, disk_keys, olds = [], [], []
        for new, disk_key, old in zip(values, disk_keys, olds, strict=True):
            if old is not None:
                if new is not None and old[SIGHTING] == new[SIGHTING]:
                    # A repeat counted: same first sighting and sequence, so the same index
                    # entry and the same summary.
                    put(disk_key, new)
                    continue
                delete(index_key_of(old, bucket_ms), handle)
                held -= 1
            if new is None:
                delete(disk_key)
                continue
            put(disk_key, new)
            first_seen = new[FIRST_SEEN]
            if not bucket <= first_seen < bucket_end:
                ms = int.from_bytes(first_seen, "big")
                start = ms - ms % bucket_ms
                bucket = start.to_bytes(8, "big")
                bucket_end = (start + bucket_ms).to_bytes(8, "big")
            seq = new[SEQ]
            ik = bucket + seq
            put(ik, disk_key, handle)
            held += 1
            if seq > top_seq:
                top_seq = seq
            if first_seen > newest:
                newest = first_seen
            if ik < lowest_put:
                lowest_put = ik
        if len(last) < len(writes):
            # A key written more than once: its earlier values are gone again, but the summary's
            # high marks (stream time, next sequence) count every value written, as they do
            # when the writes come one by one.
            for key, value in writes:
                if value is not None and value is not last[key]:
                    top_seq = max(top_seq, value[SEQ])
                    newest = max(newest, value[FIRST_SEEN])
        hint = summary.hint
        put_any = lowest_put is not _ABOVE_EVERY_INDEX_KEY
        if put_any and lowest_put < hint:
            hint = lowest_put  # a late first sighting below the hint: walk from it
        for index_key in self._pending_unindex.pop(partition, ()):
            delete(index_key, handle)
        pending = self._pending_hints.pop(partition, None)
        if pending is not None:
            hint = min(pending, lowest_put) if put_any else pending
        summary = Summary(
            held,
            int.from_bytes(top_seq, "big") + 1 if top_seq else 0,
            int.from_bytes(newest, "big"),
            hint,
        )
        batch.put(SUMMARY_KEY, summary.encode(), pdb.meta_handle)
        self._summaries[partition] = summary

    def discard_partition(self, partition: int) -> None:
        super().discard_partition(partition)
        self._pending_hints.pop(partition, None)
        self._pending_unindex.pop(partition, None)

    def close_partition(self, partition: int) -> None:
        self._summaries.pop(partition, None)
        self._pending_hints.pop(partition, None)
        self._pending_unindex.pop(partition, None)
        super().close_partition(partition)
