"""The store of ``seen_ids``: the ids in their compact disk form, and per partition a summary
and the ids held per age rank (``tables/slot_counts.py``), both in the bookkeeping family, both
changed in the same atomic batch as the ids at each commit and each restore (never replicated:
a rebuild from the changelog derives them again).

Nothing else names an id: age-out (``tables/seen_ids/``) finds the ids to delete by sweeping
the ids in key order, and only while the counts say some wait below the cutoff.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

from rocksdict import WriteBatch

from tables import key_migration
from tables import keys as key_forms
from tables.rocks import PartitionDB
from tables.seen_ids.summary import (
    SUMMARY_KEY,
    Summary,
    SweepMark,
    rank_key,
    stored_counts,
)
from tables.slot_counts import Rank, SlotCounts
from tables.store import TransactionalStore
from tables.window import (
    FIRST_SEEN,
    SEQ,
    SIGHTING,
    block_start,
    marks_of,
    rank_of,
    slot_width,
)

log = logging.getLogger(__name__)

#: Writes of new ids from this many on take the whole-array path of :meth:`extend_batch`
#: (below it, its fixed cost outweighs the per-id work it saves).
FRESH_IN_BULK = 256


class SeenIdsStore(TransactionalStore):
    """The transactional store plus the per-partition summary and counts. Keys are on disk in
    their compact form (``tables/keys.py``)."""

    key_format = key_forms.FORMAT
    disk_key = staticmethod(key_forms.to_disk)
    disk_keys = staticmethod(key_forms.to_disk_all)
    written_key = staticmethod(key_forms.from_disk)

    @staticmethod
    def convert_keys(pdb: PartitionDB, found: int, name: str) -> int | None:
        converted = key_migration.convert(pdb, found, name)
        if converted is not None:
            # No counts yet: they are taken from the ids when the partition is first read
            # (:meth:`_recount`).
            old = pdb.meta.get(SUMMARY_KEY)
            if old is not None:
                pdb.meta[SUMMARY_KEY] = Summary.of_forms_1_and_2(old).encode()
        return converted

    def __init__(self, *args: Any, bucket_ms: int, block: int, **kwargs: Any) -> None:
        """``bucket_ms``: the age-out bucket; ``block``: the sequence block of the size cap
        (``tables.window.block_size``)."""
        super().__init__(*args, **kwargs)
        self.bucket_ms = bucket_ms
        self.slot_ms = slot_width(bucket_ms)
        self.block = block
        self._summaries: dict[int, Summary] = {}
        self._counts: dict[int, SlotCounts] = {}
        self._pending_sweep: dict[int, SweepMark] = {}
        #: Partition -> how many times its ids changed other than by this worker's commits
        #: (a restore, a standby's changelog records) or it was closed: what the decision
        #: keeps of a partition is read again when this moved (``SeenIds``).
        self.generations: dict[int, int] = {}

    def summary(self, partition: int) -> Summary:
        """The committed summary of ``partition``."""
        summary = self._summaries.get(partition)
        if summary is None:
            summary = self._load(partition)[0]
        return summary

    def counts(self, partition: int) -> SlotCounts:
        """The committed counts of ``partition``."""
        counts = self._counts.get(partition)
        if counts is None:
            counts = self._load(partition)[1]
        return counts

    def _load(self, partition: int) -> tuple[Summary, SlotCounts]:
        pdb = self.partition_db(partition)
        summary = Summary.decode(pdb.meta.get(SUMMARY_KEY))
        if (summary.slot_ms, summary.block) == (self.slot_ms, self.block):
            counts = SlotCounts({rank: n for _, rank, n in stored_counts(pdb)})
        else:
            counts = self._recount(partition, pdb, summary)
        self._summaries[partition] = summary
        self._counts[partition] = counts
        return summary, counts

    def _recount(self, partition: int, pdb: PartitionDB, summary: Summary) -> SlotCounts:
        """Count the ids per rank from the ids themselves: a database of an earlier layout, or
        one whose slot width or block size changed with the window, DEDUPE_BUCKET or the cap.
        One read of every id."""
        slot_ms, block = self.slot_ms, self.block
        found: dict[Rank, int] = {}
        for _, raw in cast(Iterator[tuple[bytes, bytes]], pdb.db.items()):
            rank = rank_of(raw, slot_ms, block)
            found[rank] = found.get(rank, 0) + 1
        batch = WriteBatch(raw_mode=True)
        for key, _, _ in stored_counts(pdb):
            batch.delete(key, pdb.meta_handle)
        for rank, n in found.items():
            batch.put(rank_key(rank), n.to_bytes(8, "big"), pdb.meta_handle)
        summary.held = sum(found.values())
        summary.slot_ms, summary.block = slot_ms, block
        # The cutoff onto the new grid, rounded down: no id it left in is cut by the change.
        cut = summary.cutoff[0]
        summary.cutoff = (cut - cut % slot_ms, 0)
        batch.put(SUMMARY_KEY, summary.encode(), pdb.meta_handle)
        pdb.db.write(batch)
        if summary.held:
            log.info(
                "partition %d: counted %d ids in %d ranks (slots of %d ms, blocks of %d)",
                partition,
                summary.held,
                len(found),
                slot_ms,
                block,
            )
        return SlotCounts(found)

    def stage_sweep(self, partition: int, mark: SweepMark) -> None:
        """Age-out moved its cutoff or its sweep; stored with the partition's next commit."""
        self._pending_sweep[partition] = mark

    def staged_writes(self, partition: int) -> dict[bytes, bytes | None]:
        """The open transaction's writes to ``partition`` (key as written -> value)."""
        return self._staging.staged.get(partition) or {}

    def ids_from(self, partition: int, start: bytes) -> Iterator[tuple[bytes, bytes]]:
        """Committed ids ``(disk key, entry)`` from the disk key ``start`` on, in key order."""
        items = self.partition_db(partition).db.items(from_key=start)
        return cast(Iterator[tuple[bytes, bytes]], items)

    def extend_batch(
        self,
        partition: int,
        pdb: PartitionDB,
        batch: WriteBatch,
        writes: list[tuple[bytes, bytes | None]],
    ) -> None:
        """Apply id writes and keep the counts and the summary in step (the old entry's rank
        down one, the new one's up one; a repeat, which changes only the entry's repeat count,
        leaves both as they are).

        Each key's last write is applied against its committed value: the ids and the counts
        end as after every write in order (a restore's batch can hold several records of one
        key; a commit holds one per key).

        It runs for every id a commit or a restore writes, so it works on the encoded entries'
        bytes: the first sighting and the sequence are 8-byte big-endian fields, which compare
        as bytes as their numbers do. The summary is kept in locals.
        """
        summary = self.summary(partition)
        counts = self.counts(partition)
        held = summary.held
        # The greatest sequence and first sighting so far, in their encoded form (b"": none).
        top_seq = (summary.next_seq - 1).to_bytes(8, "big") if summary.next_seq else b""
        newest = summary.newest_ms.to_bytes(8, "big")
        slot_ms, block = self.slot_ms, self.block
        slot = -1
        slot_lo = slot_hi = b""  # the last id's slot: [slot_lo, slot_hi)
        changes: dict[Rank, int] = {}
        put, delete = batch.put, batch.delete
        last = dict(writes)
        disk_keys, olds = self.committed(partition, list(last)) if last else ([], [])
        values = list(last.values())
        if len(values) >= FRESH_IN_BULK and olds.count(None) == len(olds) and None not in values:
            # Every id new (a restore into an empty store, a commit of first sightings): the
            # marks and the counts in whole-array steps.
            marks = marks_of(cast(list[bytes], values), slot_ms, block)
            if marks is not None:
                for disk_key, new in zip(disk_keys, values, strict=True):
                    put(disk_key, new)
                held += len(values)
                top_seq = max(top_seq, marks.top_seq)
                newest = max(newest, marks.newest)
                changes = marks.ranks
                values, disk_keys, olds = [], [], []
        for new, disk_key, old in zip(values, disk_keys, olds, strict=True):
            if old is not None:
                if new is not None and old[SIGHTING] == new[SIGHTING]:
                    # A repeat counted: same first sighting and sequence, so the same counts
                    # and the same summary.
                    put(disk_key, new)
                    continue
                gone = rank_of(old, slot_ms, block)
                changes[gone] = changes.get(gone, 0) - 1
                held -= 1
            if new is None:
                delete(disk_key)
                continue
            put(disk_key, new)
            first_seen = new[FIRST_SEEN]
            if not slot_lo <= first_seen < slot_hi:
                ms = int.from_bytes(first_seen, "big")
                slot = ms - ms % slot_ms
                slot_lo = slot.to_bytes(8, "big")
                slot_hi = (slot + slot_ms).to_bytes(8, "big")
            seq = new[SEQ]
            rank = (slot, int.from_bytes(seq, "big") // block)
            changes[rank] = changes.get(rank, 0) + 1
            held += 1
            if seq > top_seq:
                top_seq = seq
            if first_seen > newest:
                newest = first_seen
        if len(last) < len(writes):
            # A key written more than once: its earlier values are gone again, but the summary's
            # high marks (stream time, next sequence) count every value written, as they do
            # when the writes come one by one.
            for key, value in writes:
                if value is not None and value is not last[key]:
                    top_seq = max(top_seq, value[SEQ])
                    newest = max(newest, value[FIRST_SEEN])
        counts.apply(changes)
        meta = pdb.meta_handle
        for changed in changes:
            n = counts.counts.get(changed)
            if n is None:
                delete(rank_key(changed), meta)
            else:
                put(rank_key(changed), n.to_bytes(8, "big"), meta)
        sweep = self._pending_sweep.pop(partition, None)
        summary = Summary(
            held,
            # The next block's start: entries keep their block's start only, so a worker that
            # reads this (after a restart, a rebalance or a restore) begins a new block.
            block_start(int.from_bytes(top_seq, "big"), block) + block if top_seq else 0,
            int.from_bytes(newest, "big"),
            summary.cutoff if sweep is None else sweep.cutoff,
            slot_ms,
            block,
            summary.cursor if sweep is None else sweep.cursor,
        )
        put(SUMMARY_KEY, summary.encode(), meta)
        self._summaries[partition] = summary

    def discard_partition(self, partition: int) -> None:
        super().discard_partition(partition)
        self._pending_sweep.pop(partition, None)

    def restored(self, partition: int) -> None:
        self.generations[partition] = self.generations.get(partition, 0) + 1

    def close_partition(self, partition: int) -> None:
        self.restored(partition)  # what it holds when opened again may be another worker's
        self._summaries.pop(partition, None)
        self._counts.pop(partition, None)
        self._pending_sweep.pop(partition, None)
        super().close_partition(partition)
