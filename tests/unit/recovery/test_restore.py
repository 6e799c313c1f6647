"""The bulk restorer's loop (recovery/restore.py) against a scripted reader and a recording store.

The real broker and RocksDB are in tests/integration/test_age_out.py (a rebuilt store equal to
the live one) and tests/faults/test_recovery_takeover.py (takeovers, kill -9 mid-restore)."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from recovery import restore
from recovery.reader import Fetched
from recovery.restore import Progress, Restorer

TP = TopicPartition("app-seen_ids-changelog", 3)


@dataclass
class Record:
    offset: int
    key: bytes
    value: bytes | None


@dataclass
class ScriptedReader:
    """Hands out the committed records of one partition, ``per_fetch`` per fetch, each record
    its own record batch unless ``batches`` gives the sizes; offsets in between (commit
    markers, aborted records) move the position without a record."""

    records: list[Record]
    end: int
    per_fetch: int = 3
    batches: list[int] | None = None
    fetches: list[int] = field(default_factory=list)
    closed: bool = False

    async def fetch(self, tp: TopicPartition, offset: int, end: int) -> Fetched:
        assert tp == TP and end == self.end
        self.fetches.append(offset)
        ahead = [r for r in self.records if offset <= r.offset < end][: self.per_fetch]
        found = Fetched(
            records=[(r.key, r.value) for r in ahead],
            next_offset=ahead[-1].offset + 1 if ahead else self.end,  # only markers left
        )
        sizes = self.batches or [1] * len(ahead)
        count = 0
        for size in sizes:
            count += size
            found.cuts.append((count, ahead[count - 1].offset))
        return found

    async def close(self) -> None:
        self.closed = True


@dataclass
class RecordingStore:
    offset: int | None = None
    empty: bool = True
    writes: list[tuple[list[tuple[bytes, bytes | None]], int, bool]] = field(default_factory=list)
    bulk_begun: bool = False
    bulk_records: int = 0
    bulk_ended: bool = False

    def restored_offset(self, partition: int) -> int | None:
        assert partition == TP.partition
        return self.offset

    def begin_bulk(self, partition: int, records: int) -> bool:
        self.bulk_begun = True
        self.bulk_records = records
        return self.offset is None

    def write_restored(
        self, partition: int, records: list[tuple[bytes, bytes | None]], offset: int, *, wal: bool
    ) -> None:
        self.writes.append((records, offset, wal))
        self.offset = offset

    def end_bulk(self, partition: int) -> None:
        self.bulk_ended = True

    #: Answers of :meth:`compacting` still to give (then False); each call is counted.
    compacting_answers: list[bool] = field(default_factory=list)
    compacting_asked: int = 0

    def compacting(self, partition: int) -> bool:
        self.compacting_asked += 1
        return self.compacting_answers.pop(0) if self.compacting_answers else False


def changelog(n: int) -> list[Record]:
    """``n`` records at offsets 0..n-1 with a commit marker after every fourth (no record)."""
    records, offset = [], 0
    for i in range(n):
        records.append(Record(offset, f"id-{i}".encode(), None if i % 7 == 6 else b"entry"))
        offset += 2 if i % 4 == 3 else 1
    return records


def test_an_empty_store_is_restored_to_the_end_without_the_wal() -> None:
    records = changelog(10)
    end = records[-1].offset + 2  # a last commit marker
    reader = ScriptedReader(records, end)
    store = RecordingStore()
    seen: list[tuple[int, int]] = []
    restorer = Restorer(reader, lambda p, n: seen.append((p.position, n)))
    done = asyncio.run(restorer.restore(store, TP, end, lambda: True))
    assert done and store.bulk_begun and store.bulk_ended
    assert store.bulk_records == end  # every offset the restore covers, markers included
    written = [kv for batch, _, _ in store.writes for kv in batch]
    assert written == [(r.key, r.value) for r in records]  # in order, deletes included
    assert all(not wal for _, _, wal in store.writes)
    # Each batch carries the offset of its last record; the end is held through the marker.
    assert [off for _, off, _ in store.writes[:-1]] == [records[i].offset for i in (2, 5, 8, 9)]
    assert store.offset == end - 1
    assert sum(n for _, n in seen) == len(records) and seen[-1] == (end, 0)


def test_a_store_holding_a_prefix_reads_only_the_tail_with_the_wal() -> None:
    records = changelog(12)
    end = records[-1].offset + 1
    held = records[5].offset
    reader = ScriptedReader(records, end)
    store = RecordingStore(offset=held)
    done = asyncio.run(Restorer(reader).restore(store, TP, end, lambda: True))
    assert done
    written = [kv for batch, _, _ in store.writes for kv in batch]
    assert written == [(r.key, r.value) for r in records[6:]]
    assert all(wal for _, _, wal in store.writes)


def test_a_store_at_the_end_reads_nothing() -> None:
    reader = ScriptedReader(changelog(4), 6)
    store = RecordingStore(offset=5)
    assert asyncio.run(Restorer(reader).restore(store, TP, 6, lambda: True))
    assert store.writes == [] and reader.fetches == []


@pytest.mark.parametrize("after_writes", [0, 1, 2])
def test_a_restore_no_longer_wanted_stops_before_its_next_write(after_writes: int) -> None:
    records = changelog(12)
    end = records[-1].offset + 1
    store = RecordingStore()

    def still_wanted() -> bool:
        return len(store.writes) < after_writes

    reader = ScriptedReader(records, end)
    done = asyncio.run(Restorer(reader).restore(store, TP, end, still_wanted))
    assert not done and not store.bulk_ended
    assert len(store.writes) == after_writes


@pytest.mark.parametrize("after_writes", [1, 2])
def test_a_restore_stopped_by_a_rebalance_reports_its_end_with_nothing_left(
    after_writes: int,
) -> None:
    """The last report of a revoked restore says 0 offsets left: the worker's gauge of it
    (``dedupe_restore_remaining_offsets``) would otherwise keep its last figure for good."""
    records = changelog(12)
    end = records[-1].offset + 1
    store = RecordingStore()
    seen: list[tuple[int, int, bool]] = []
    restorer = Restorer(
        ScriptedReader(records, end), lambda p, n: seen.append((p.remaining, n, p.ended))
    )
    assert not asyncio.run(
        restorer.restore(store, TP, end, lambda: len(store.writes) < after_writes)
    )
    assert all(left > 0 and not ended for left, _, ended in seen[:-1])
    assert len(seen) == after_writes + 1 and seen[-1] == (0, 0, True)


def test_a_failed_restore_reports_its_end_with_nothing_left() -> None:
    records = changelog(5)
    end = records[-1].offset + 1

    class FailingStore(RecordingStore):
        def write_restored(self, *args: Any, **kwargs: Any) -> None:
            raise OSError("disk full")

    seen: list[tuple[int, bool]] = []
    restorer = Restorer(
        ScriptedReader(records, end), lambda p, n: seen.append((p.remaining, p.ended))
    )
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(restorer.restore(FailingStore(), TP, end, lambda: True))
    assert seen == [(0, True)]


def test_a_restore_into_an_empty_store_ends_its_bulk_mode_without_waiting_for_compaction() -> None:
    """The restorer only starts the compaction (the queue waits for it beside the next
    partition's restore: recovery/bulk.py, tests/unit/recovery/test_bulk_restores.py)."""
    records = changelog(6)
    end = records[-1].offset + 1
    store = RecordingStore(compacting_answers=[True] * 5)
    assert asyncio.run(Restorer(ScriptedReader(records, end)).restore(store, TP, end, lambda: True))
    assert store.bulk_ended and store.compacting_asked == 0
    # A restore with nothing left to read ends the bulk mode again, and that is all.
    store.bulk_ended = False
    assert asyncio.run(Restorer(ScriptedReader(records, end)).restore(store, TP, end, lambda: True))
    assert store.bulk_ended and store.compacting_asked == 0


def test_waiting_for_the_compaction_leaves_the_event_loop_free(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The partition counts as restored only when the store no longer compacts."""
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    store = RecordingStore(compacting_answers=[True, True, True])
    ticks = 0

    async def run() -> bool:
        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())
        try:
            return await restore.wait_compacted(store, TP, lambda: True)
        finally:
            ticker.cancel()

    assert asyncio.run(run())
    assert store.compacting_asked == 4  # 3 times yes, then no
    assert ticks >= 3  # the event loop ran other tasks while it waited


def test_a_wait_for_the_compaction_no_longer_wanted_is_not_done(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    store = RecordingStore(compacting_answers=[True] * 100)
    assert not asyncio.run(restore.wait_compacted(store, TP, lambda: store.compacting_asked < 3))
    assert store.compacting_asked == 3


def test_a_fetch_is_written_in_batches_that_end_where_its_record_batches_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restore, "BATCH_RECORDS", 3)
    records = changelog(8)
    end = records[-1].offset + 1
    # One fetch of eight records in record batches of 2, 2, 3 and 1 records.
    reader = ScriptedReader(records, end, per_fetch=8, batches=[2, 2, 3, 1])
    store = RecordingStore()
    assert asyncio.run(Restorer(reader).restore(store, TP, end, lambda: True))
    sizes = [len(batch) for batch, _, _ in store.writes]
    assert sizes == [4, 3, 1, 0]  # 2+2 reach 3, 3, the fetch's end, then the end mark
    assert [off for _, off, _ in store.writes[:3]] == [records[i].offset for i in (3, 6, 7)]
    assert reader.fetches == [0]


def test_the_garbage_collector_is_on_again_after_a_write_that_failed() -> None:
    records = changelog(5)
    end = records[-1].offset + 1

    class FailingStore(RecordingStore):
        def write_restored(self, *args: Any, **kwargs: Any) -> None:
            assert not gc.isenabled()  # paused while a fetch is written
            raise OSError("disk full")

    assert gc.isenabled()
    with pytest.raises(OSError, match="disk full"):
        asyncio.run(
            Restorer(ScriptedReader(records, end)).restore(FailingStore(), TP, end, lambda: True)
        )
    assert gc.isenabled()


def test_closing_the_restorer_closes_its_reader() -> None:
    reader = ScriptedReader([], 1)
    asyncio.run(Restorer(reader).close())
    assert reader.closed


def test_progress_says_where_it_is_and_how_long_is_left() -> None:
    progress = Progress(TP, start=0, end=1000, records=500, position=500)
    progress.started_at -= 2.0
    text = progress.describe()
    assert "app-seen_ids-changelog-3" in text and "offset 500 of 1000 (50%)" in text
    assert "250 records/s" in text.replace(",", "") and "about 2s left" in text
