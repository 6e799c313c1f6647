"""Bulk restore: a changelog partition read straight into its store in large write batches.

Faust's recovery would hand every changelog record through its consumer, a queue and a per-record
loop; the worker's recovery reads no changelog that way (``recovery/faust_adapter.py``). The
restorer reads one partition with the changelog reader (``recovery/reader.py``:
``read_committed``, so aborted transactions never reach it; large fetches, no per-record
objects), and writes each fetch in large RocksDB write batches through the
store's own write path, so the age-out counts, the summary and the source-offsets record are rebuilt
in the same pass, exactly as a live commit derives them. Each batch carries the changelog offset it
brings the store to, so a restore stopped at any point resumes after the last batch written.

Into an empty store the batches go with RocksDB's write-ahead log off (the WAL doubles the bytes
written and nothing of an empty store needs it): the store is marked as being restored first
(with a synced write), and the mark is removed only after every column family was flushed to
disk. A database still marked when it is opened lost its unflushed batches in a crash and is
rebuilt from the changelog (``tables/partitions.py``). A restore onto existing state (the tail
after a restart) keeps the WAL.

Into an empty store nothing is compacted while the batches are written (``tables/rocks.py``):
at its end the restore turns compactions on, and its caller waits, with the event loop free,
until RocksDB has compacted what it wrote (:func:`wait_compacted`); only then does the partition
count as restored. The wait is not the restorer's: RocksDB compacts in its own threads, so the
queue (``recovery/bulk.py``) restores the next partition meanwhile.

The restore ends at the partition's last stable offset read at its start: only this partition's
transactional producer writes its changelog, and it has fenced any older one and is idle until
the recovery ends, so nothing is written past it meanwhile.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from aiokafka.structs import TopicPartition

from recovery.reader import Fetched

log = logging.getLogger(__name__)

#: A restore logs its progress this often (seconds) while it runs.
PROGRESS_EVERY = 5.0
#: Most bytes one fetch brings back per partition (aiokafka's ``max_partition_fetch_bytes``).
FETCH_BYTES = 8 * 1024 * 1024
#: Records of a fetch are written in batches of about this many (a write ends where a record
#: batch of the fetch ends, so it may hold one record batch more). Into an empty store each
#: batch fills one memtable, flushed as it is written (``tables/rocks.py``): large enough for
#: few level-0 files (with vector memtables, which take a batch faster than skiplists), small
#: enough to check for a rebalance about every half second.
BATCH_RECORDS = 100_000


class BulkTarget(Protocol):
    """A store the restorer can write (``tables.store.TransactionalStore``)."""

    def restored_offset(self, partition: int) -> int | None:
        """The changelog offset the partition's database holds data through (None: empty)."""

    def begin_bulk(self, partition: int, records: int) -> bool:
        """Prepare ``partition`` for a restore of ``records`` changelog offsets; True when its
        batches may skip the WAL."""

    def write_restored(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        offset: int,
        *,
        wal: bool,
    ) -> None:
        """Apply changelog ``records`` (value None: a delete), in order, through ``offset``."""

    def end_bulk(self, partition: int) -> None:
        """Every batch written is on disk: flush, then clear what :meth:`begin_bulk` marked."""

    def compacting(self, partition: int) -> bool:
        """True while RocksDB still compacts what the restore wrote (it compacts nothing while
        it writes): writes to the partition could stall until it is done."""


@dataclass
class Progress:
    """One partition's restore, as the log and the metrics report it."""

    tp: TopicPartition
    start: int
    end: int
    records: int = 0
    position: int = 0
    started_at: float = field(default_factory=time.monotonic)
    #: The restore returned: done, stopped by a rebalance, or failed (the queue may try again).
    ended: bool = False

    @property
    def remaining(self) -> int:
        """Offsets still to read: 0 once the restore ended, however it ended."""
        return 0 if self.ended else max(self.end - self.position, 0)

    @property
    def rate(self) -> float:
        """Records written per second so far."""
        elapsed = time.monotonic() - self.started_at
        return self.records / elapsed if elapsed > 0 else 0.0

    def describe(self) -> str:
        done = self.position - self.start
        total = max(self.end - self.start, 1)
        rate = self.rate
        left = f"about {self.remaining / rate:.0f}s left" if rate > 0 else "time left unknown"
        return (
            f"restoring {self.tp.topic}-{self.tp.partition}: offset {self.position} of "
            f"{self.end} ({100 * done / total:.0f}%), {self.records:,} records written, "
            f"{rate:,.0f} records/s, {left}"
        )


#: Called after each batch written (progress, records it wrote) and once at every end of a
#: restore that read anything, with 0: done, stopped by a rebalance or failed
#: (``Progress.ended``).
OnProgress = Callable[[Progress, int], None]


class RecordSource(Protocol):
    """Reads committed changelog records (``recovery.reader.ChangelogReader``)."""

    async def fetch(
        self, tp: TopicPartition, offset: int, end: int, *, max_wait_ms: int | None = None
    ) -> Fetched:
        """The committed records of ``tp`` from ``offset`` on, below ``end`` (one fetch)."""

    async def close(self) -> None:
        """Close its connections."""


#: How often (seconds) a restore that ended looks whether RocksDB has compacted what it wrote.
COMPACTION_POLL = 0.05


async def wait_compacted(
    store: BulkTarget, tp: TopicPartition, still_wanted: Callable[[], bool]
) -> bool:
    """Wait (without blocking the event loop: RocksDB compacts in its own threads) until the
    store no longer compacts what a bulk restore of ``tp`` wrote; False when
    ``still_wanted()`` turned false first. The partition's database is complete either way:
    this only keeps its first writes after the restore from stalling on the compaction."""
    if not store.compacting(tp.partition):
        return True
    started = logged_at = time.monotonic()
    log.info("%s-%d: waiting for RocksDB to compact the restored ids", *tp)
    while store.compacting(tp.partition):
        if not still_wanted():
            return False
        await asyncio.sleep(COMPACTION_POLL)
        if time.monotonic() - logged_at >= PROGRESS_EVERY:
            log.info("%s-%d: still compacting the restored ids", *tp)
            logged_at = time.monotonic()
    log.info(
        "%s-%d: restored ids compacted in %.1fs", tp.topic, tp.partition, time.monotonic() - started
    )
    return True


class Restorer:
    """Restores changelog partitions into their stores (see the module docstring) with
    ``reader``, which it closes in :meth:`close`."""

    def __init__(self, reader: RecordSource, on_progress: OnProgress | None = None) -> None:
        self._reader = reader
        self._on_progress = on_progress

    async def close(self) -> None:
        await self._reader.close()

    async def restore(
        self,
        store: BulkTarget,
        tp: TopicPartition,
        end: int,
        still_wanted: Callable[[], bool],
    ) -> bool:
        """Read ``tp`` from after the offset its store holds up to ``end`` (exclusive) into the
        store. False when ``still_wanted()`` turned false first (a rebalance): the store then
        holds a prefix of the changelog, and the next restore goes on from there. True: the
        store holds it through ``end`` and may still be compacting it (:func:`wait_compacted`)."""
        held = store.restored_offset(tp.partition)
        start = 0 if held is None else held + 1
        progress = Progress(tp, start, end, position=start)
        if start >= end:
            log.info(
                "%s-%d: nothing to restore (the store holds it through offset %d)", *tp, end - 1
            )
            # A restore stopped after its last write, or one whose compaction a rebalance
            # stopped waiting for: ended (again; a no-op for a store that is not in bulk mode).
            store.end_bulk(tp.partition)
            return True
        try:
            return await self._read_through(store, tp, end, still_wanted, progress)
        finally:
            # Every end, a stop for a rebalance and a failure included: nothing restores the
            # partition here now, so its figures must not show offsets left (a revoked
            # partition's would stay above 0 for good, and look like a restore that never ends).
            progress.ended = True
            if self._on_progress is not None:
                self._on_progress(progress, 0)

    async def _read_through(
        self,
        store: BulkTarget,
        tp: TopicPartition,
        end: int,
        still_wanted: Callable[[], bool],
        progress: Progress,
    ) -> bool:
        start = progress.start
        wal = not store.begin_bulk(tp.partition, end - start)
        log.info(
            "restoring %s-%d from offset %d to %d (%d offsets%s)",
            tp.topic,
            tp.partition,
            start,
            end,
            end - start,
            ", write-ahead log off: the store was empty" if not wal else "",
        )
        logged_at = time.monotonic()
        while progress.position < end:
            if not still_wanted():
                log.info("restore of %s-%d stopped at offset %d", *tp, progress.position)
                return False
            fetched = await self._reader.fetch(tp, progress.position, end)
            # A fetch is hundreds of thousands of records when the changelog is compressed:
            # writing them with the garbage collector on ran its collections over the whole
            # worker's heap, again and again, for nothing: the records form no cycles, so
            # reference counting frees them.
            collecting = gc.isenabled()
            gc.disable()
            try:
                written = self._write(store, tp, fetched, progress, still_wanted, wal=wal)
            finally:
                if collecting:
                    gc.enable()
            if not written:
                return False
            # Past control records (commit markers) and aborted batches too.
            progress.position = max(progress.position, fetched.next_offset)
            if time.monotonic() - logged_at >= PROGRESS_EVERY:
                log.info("%s", progress.describe())
                logged_at = time.monotonic()
        if not still_wanted():
            return False
        # The last records may be commit markers: the store holds the changelog through them.
        store.write_restored(tp.partition, [], end - 1, wal=wal)
        store.end_bulk(tp.partition)
        progress.position = end
        elapsed = time.monotonic() - progress.started_at
        log.info(
            "restored %s-%d through offset %d: %d records in %.1fs (%.0f records/s)",
            tp.topic,
            tp.partition,
            end - 1,
            progress.records,
            elapsed,
            progress.records / elapsed if elapsed > 0 else 0.0,
        )
        return True

    def _write(
        self,
        store: BulkTarget,
        tp: TopicPartition,
        fetched: Fetched,
        progress: Progress,
        still_wanted: Callable[[], bool],
        *,
        wal: bool,
    ) -> bool:
        """Write a fetch's records in batches of about ``BATCH_RECORDS``, each ending where a
        record batch of the fetch ended; False when ``still_wanted()`` turned false first."""
        for batch, last in write_batches(fetched):
            if not still_wanted():  # checked right before writing: the store may be closed
                return False
            store.write_restored(tp.partition, batch, last, wal=wal)
            progress.records += len(batch)
            progress.position = last + 1
            if self._on_progress is not None:
                self._on_progress(progress, len(batch))
        return True


def write_batches(fetched: Fetched) -> Iterator[tuple[list[tuple[bytes, bytes | None]], int]]:
    """A fetch's records in write batches of about :data:`BATCH_RECORDS`, each with the offset
    it brings the store to (where a record batch of the fetch ended)."""
    records, done = fetched.records, 0
    for n, (count, last) in enumerate(fetched.cuts, 1):
        if count - done < BATCH_RECORDS and n < len(fetched.cuts):
            continue
        yield records[done:count], last
        done = count
