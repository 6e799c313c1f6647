"""The bulk restorer's loop (tables/restore.py) against a scripted reader and a recording store.

The real broker and RocksDB are in tests/integration/test_age_out.py (a rebuilt store equal to
the live one) and tests/faults/test_recovery_takeover.py (takeovers, kill -9 mid-restore)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from tables.restore import Progress, Restorer

TP = TopicPartition("app-seen_ids-changelog", 3)


@dataclass
class Record:
    offset: int
    key: bytes
    value: bytes | None


@dataclass
class ScriptedReader:
    """Hands out the committed records of one partition, a few per fetch; offsets in
    ``skipped`` (commit markers, aborted records) move the position without a record."""

    records: list[Record]
    end: int
    per_fetch: int = 3
    position_: int = 0
    started: bool = False
    stopped: bool = False
    assigned: list[TopicPartition] = field(default_factory=list)

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    def assign(self, tps: list[TopicPartition]) -> None:
        assert tps in ([TP], [])
        self.assigned = tps

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.position_ = offset

    async def getmany(self, tp: TopicPartition, timeout_ms: int) -> dict[Any, list[Record]]:
        ahead = [r for r in self.records if r.offset >= self.position_][: self.per_fetch]
        if ahead:
            self.position_ = ahead[-1].offset + 1
        else:
            self.position_ = self.end  # only markers left
        return {tp: ahead}

    async def position(self, tp: TopicPartition) -> int:
        return self.position_


@dataclass
class RecordingStore:
    offset: int | None = None
    empty: bool = True
    writes: list[tuple[list[tuple[bytes, bytes | None]], int, bool]] = field(default_factory=list)
    bulk_begun: bool = False
    bulk_ended: bool = False

    def restored_offset(self, partition: int) -> int | None:
        assert partition == TP.partition
        return self.offset

    def begin_bulk(self, partition: int) -> bool:
        self.bulk_begun = True
        return self.offset is None

    def write_restored(
        self, partition: int, records: list[tuple[bytes, bytes | None]], offset: int, *, wal: bool
    ) -> None:
        self.writes.append((records, offset, wal))
        self.offset = offset

    def end_bulk(self, partition: int) -> None:
        self.bulk_ended = True


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
    restorer = Restorer(lambda: reader, lambda p, n: seen.append((p.position, n)))  # type: ignore[arg-type,return-value]
    done = asyncio.run(restorer.restore(store, TP, end, lambda: True))
    assert done and store.bulk_begun and store.bulk_ended
    written = [kv for batch, _, _ in store.writes for kv in batch]
    assert written == [(r.key, r.value) for r in records]  # in order, deletes included
    assert all(not wal for _, _, wal in store.writes)
    # Each batch carries the offset of its last record; the end is held through the marker.
    assert [off for _, off, _ in store.writes[:-1]] == [records[i].offset for i in (2, 5, 8, 9)]
    assert store.offset == end - 1
    assert sum(n for _, n in seen) == len(records) and seen[-1] == (end, 0)
    assert reader.assigned == []  # an idle reader does not go on fetching the partition


def test_a_store_holding_a_prefix_reads_only_the_tail_with_the_wal() -> None:
    records = changelog(12)
    end = records[-1].offset + 1
    held = records[5].offset
    reader = ScriptedReader(records, end)
    store = RecordingStore(offset=held)
    done = asyncio.run(Restorer(lambda: reader).restore(store, TP, end, lambda: True))  # type: ignore[arg-type,return-value]
    assert done
    written = [kv for batch, _, _ in store.writes for kv in batch]
    assert written == [(r.key, r.value) for r in records[6:]]
    assert all(wal for _, _, wal in store.writes)


def test_a_store_at_the_end_reads_nothing() -> None:
    reader = ScriptedReader(changelog(4), 6)
    store = RecordingStore(offset=5)
    assert asyncio.run(Restorer(lambda: reader).restore(store, TP, 6, lambda: True))  # type: ignore[arg-type,return-value]
    assert store.writes == [] and not reader.started


@pytest.mark.parametrize("after_writes", [0, 1, 2])
def test_a_restore_no_longer_wanted_stops_before_its_next_write(after_writes: int) -> None:
    records = changelog(12)
    end = records[-1].offset + 1
    store = RecordingStore()

    def still_wanted() -> bool:
        return len(store.writes) < after_writes

    reader = ScriptedReader(records, end)
    done = asyncio.run(Restorer(lambda: reader).restore(store, TP, end, still_wanted))  # type: ignore[arg-type,return-value]
    assert not done and not store.bulk_ended
    assert len(store.writes) == after_writes


def test_progress_says_where_it_is_and_how_long_is_left() -> None:
    progress = Progress(TP, start=0, end=1000, records=500, position=500)
    progress.started_at -= 2.0
    text = progress.describe()
    assert "app-seen_ids-changelog-3" in text and "offset 500 of 1000 (50%)" in text
    assert "250 records/s" in text.replace(",", "") and "about 2s left" in text
