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
from typing import Any

from rocksdict import WriteBatch

from tables import keys as key_forms
from tables.rocks import PartitionDB
from tables.store import TransactionalStore
from tables.window import index_key_of

#: Column family of the local age-out index: index key -> the id's key (in its disk form).
INDEX_CF = "dedupe-age-index"
#: Key (in META_CF) of the partition's summary: ids held, next sequence, newest first sighting,
#: seek hint.
SUMMARY_KEY = b"seen-ids-summary"


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
    written_key = staticmethod(key_forms.from_disk)

    def __init__(self, *args: Any, bucket_ms: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.bucket_ms = bucket_ms
        self._summaries: dict[int, Summary] = {}
        self._pending_hints: dict[int, bytes] = {}

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
        """Apply id writes and keep the index and summary in step (old entry out, new in;
        a repeat, which changes only the entry's repeat count, leaves both as they are).

        It runs for every id a transaction wrote, at its commit, so the index key is cut from
        the encoded entry (:func:`index_key_of`) instead of decoding it, and the summary is
        kept in locals.
        """
        summary = self.summary(partition)
        held, next_seq, newest_ms, hint = (
            summary.held,
            summary.next_seq,
            summary.newest_ms,
            summary.hint,
        )
        bucket_ms = self.bucket_ms
        to_disk = self.disk_key
        # The disk forms of the keys the transaction read (prefetched): not encoded again.
        encoded = self._staging.disk.get(partition) or {}
        handle = pdb.handles[INDEX_CF]
        put, delete = batch.put, batch.delete
        keys: list[Any] = [k for k, _ in writes]
        olds = self.committed_values(partition, keys) if keys else []
        current: dict[bytes, bytes | None] = {}
        lowest_put: bytes | None = None
        for (key, new), committed in zip(writes, olds, strict=True):
            old = current.get(key, committed)
            disk_key = encoded.get(key) or to_disk(key)
            if old is not None and new is not None and old[:16] == new[:16]:
                # A repeat counted: same first sighting and sequence, so the same index entry
                # (already in the index or put earlier in this loop) and the same summary.
                put(disk_key, new)
                current[key] = new
                continue
            if old is not None:
                delete(index_key_of(old, bucket_ms), handle)
                held -= 1
            if new is None:
                delete(disk_key)
            else:
                put(disk_key, new)
                first_seen = int.from_bytes(new[:8], "big")
                ik = (first_seen - first_seen % bucket_ms).to_bytes(8, "big") + new[8:16]
                put(ik, disk_key, handle)
                held += 1
                seq = int.from_bytes(new[8:16], "big")
                if seq >= next_seq:
                    next_seq = seq + 1
                if first_seen > newest_ms:
                    newest_ms = first_seen
                if lowest_put is None or ik < lowest_put:
                    lowest_put = ik
            current[key] = new
        if lowest_put is not None and lowest_put < hint:
            hint = lowest_put  # a late first sighting below the hint: walk from it
        pending = self._pending_hints.pop(partition, None)
        if pending is not None:
            hint = pending if lowest_put is None else min(pending, lowest_put)
        summary = Summary(held, next_seq, newest_ms, hint)
        batch.put(SUMMARY_KEY, summary.encode(), pdb.meta_handle)
        self._summaries[partition] = summary

    def discard_partition(self, partition: int) -> None:
        super().discard_partition(partition)
        self._pending_hints.pop(partition, None)

    def close_partition(self, partition: int) -> None:
        self._summaries.pop(partition, None)
        self._pending_hints.pop(partition, None)
        super().close_partition(partition)
