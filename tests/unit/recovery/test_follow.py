"""The standby follower's turns (recovery/follow.py) against a scripted changelog reader and
recording stores. The real broker and RocksDB: tests/faults/test_recovery_takeover.py (F17, F21)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from recovery import restore
from recovery.follow import Follower
from recovery.reader import Fetched

A = TopicPartition("app-seen_ids-changelog", 0)
B = TopicPartition("app-seen_ids-changelog", 1)


@dataclass
class Record:
    offset: int
    key: bytes
    value: bytes | None


@dataclass
class Reader:
    """Each partition's committed records, two per fetch; the last stable offset is ``ends``.
    Offsets missing from a log are commit markers: a fetch goes past them."""

    logs: dict[TopicPartition, list[Record]]
    ends: dict[TopicPartition, int]
    #: ``(tp, offset)`` of every fetch, in order.
    fetches: list[tuple[TopicPartition, int]] = field(default_factory=list)

    async def fetch(
        self, tp: TopicPartition, offset: int, end: int, *, max_wait_ms: int | None = None
    ) -> Fetched:
        self.fetches.append((tp, offset))
        ahead = [r for r in self.logs[tp] if offset <= r.offset < end][:2]
        found = Fetched(stable=self.ends[tp], next_offset=offset)
        for r in ahead:
            found.records.append((r.key, r.value))
            found.cuts.append((len(found.records), r.offset))
        if ahead:
            found.first_offset = ahead[0].offset
            found.next_offset = ahead[-1].offset + 1
        else:
            found.next_offset = max(offset, self.ends[tp])
        return found

    async def close(self) -> None: ...


@dataclass
class Store:
    partition: int
    offset: int | None = None
    written: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    wal: list[bool] = field(default_factory=list)
    bulk_ended: int = 0

    def restored_offset(self, partition: int) -> int | None:
        assert partition == self.partition
        return self.offset

    def write_restored(
        self, partition: int, records: list[tuple[bytes, bytes | None]], offset: int, *, wal: bool
    ) -> None:
        self.written.extend(records)
        self.wal.append(wal)
        self.offset = offset

    def begin_bulk(self, partition: int, records: int) -> bool:
        return False

    def end_bulk(self, partition: int) -> None:
        assert partition == self.partition
        self.bulk_ended += 1

    #: Answers of :meth:`compacting` still to give (then False).
    compacting_answers: list[bool] = field(default_factory=list)

    #: Records written when :meth:`compacting` was asked, each time.
    written_when_asked: list[int] = field(default_factory=list)

    def compacting(self, partition: int) -> bool:
        assert partition == self.partition
        self.written_when_asked.append(len(self.written))
        return self.compacting_answers.pop(0) if self.compacting_answers else False


def log_of(n: int, prefix: str) -> list[Record]:
    return [Record(i, f"{prefix}{i}".encode(), b"v") for i in range(n)]


def follower_with(reader: Reader) -> Follower:
    return Follower(reader)


def turns(follower: Follower, n: int) -> None:
    async def run() -> None:
        for _ in range(n):
            await follower._turn()

    asyncio.run(run())


def test_each_followed_partition_is_read_from_after_what_its_store_holds() -> None:
    reader = Reader({A: log_of(5, "a"), B: log_of(4, "b")}, {A: 5, B: 4})
    a, b = Store(0, offset=2), Store(1)
    follower = follower_with(reader)
    follower.follow({A: a, B: b})
    turns(follower, 3)
    assert next(f for f in reader.fetches if f[0] == A) == (A, 3)
    assert next(f for f in reader.fetches if f[0] == B) == (B, 0)
    assert a.written == [(b"a3", b"v"), (b"a4", b"v")] and a.offset == 4
    assert b.written == [(f"b{i}".encode(), b"v") for i in range(4)] and b.offset == 3
    assert all(a.wal + b.wal)  # a standby copy is written with the WAL
    status = follower.status()
    assert (status[A].held, status[A].lag) == (4, 0) and (status[B].held, status[B].lag) == (3, 0)


def test_the_lag_is_the_last_stable_offset_minus_the_position_read() -> None:
    reader = Reader({A: log_of(9, "a")}, {A: 9})
    follower = follower_with(reader)
    follower.follow({A: Store(0)})
    turns(follower, 1)
    assert follower.status()[A].lag == 7


def test_a_partition_no_longer_followed_is_never_written_again() -> None:
    reader = Reader({A: log_of(6, "a"), B: log_of(6, "b")}, {A: 6, B: 6})
    a, b = Store(0), Store(1)
    follower = follower_with(reader)
    follower.follow({A: a, B: b})
    turns(follower, 1)
    follower.follow({B: b})  # A was promoted to an active partition here
    turns(follower, 3)
    assert a.written == [(b"a0", b"v"), (b"a1", b"v")]
    assert len(b.written) == 6


def test_a_fetch_is_not_written_when_the_store_moved_meanwhile() -> None:
    """A partition promoted and its store written further by the restore, then followed again
    while a fetch of older records was on its way: they are not written over the newer, and
    the next fetch starts past what the store holds."""
    reader = Reader({A: log_of(6, "a")}, {A: 6})
    a = Store(0)
    follower = follower_with(reader)
    follower.follow({A: a})
    turns(follower, 1)  # a0, a1 written
    fetch = reader.fetch

    async def restore_meanwhile(tp: TopicPartition, offset: int, end: int, **kw: Any) -> Fetched:
        found = await fetch(tp, offset, end, **kw)
        a.offset = 4  # the restore of an active owner wrote through 4 meanwhile
        return found

    reader.fetch = restore_meanwhile  # type: ignore[method-assign]
    turns(follower, 1)
    assert a.written == [(b"a0", b"v"), (b"a1", b"v")]  # a2, a3 dropped
    reader.fetch = fetch  # type: ignore[method-assign]
    turns(follower, 1)
    assert reader.fetches[-1] == (A, 5)
    assert a.written == [(b"a0", b"v"), (b"a1", b"v"), (b"a5", b"v")]


def test_commit_markers_at_the_end_are_read_once() -> None:
    """A partition that ends with a commit marker (offset 3 here): the store holds through the
    last record, and the next fetch starts past the marker, not at it again."""
    reader = Reader({A: log_of(3, "a")}, {A: 4})
    a = Store(0)
    follower = follower_with(reader)
    follower.follow({A: a})
    turns(follower, 5)
    assert [o for _, o in reader.fetches] == [0, 2, 3, 4, 4]
    assert a.offset == 2 and follower.status()[A].lag == 0


def test_no_partition_followed_is_a_quiet_wait() -> None:
    follower = follower_with(Reader({}, {}))

    async def one() -> Any:
        return await asyncio.wait_for(follower._turn(), timeout=5)

    asyncio.run(one())
    assert follower.status() == {}


def test_with_nothing_to_follow_a_turn_waits_for_a_change() -> None:
    """A rebalance that leaves no standby partition here must not leave the follower spinning:
    a turn waits (up to a second) for the next ``follow()`` instead of returning at once (it
    did, and an idle worker's event loop ran at 100% of a core)."""
    follower = follower_with(Reader({}, {}))
    follower.follow({})

    async def run() -> tuple[bool, bool]:
        try:
            await asyncio.wait_for(follower._turn(), timeout=0.2)
            waited = False
        except TimeoutError:
            waited = True
        turn = asyncio.ensure_future(follower._turn())
        await asyncio.sleep(0)
        follower.follow({})  # the next rebalance ends the wait
        await asyncio.wait_for(turn, timeout=0.5)
        return waited, turn.done()

    assert asyncio.run(run()) == (True, True)


def test_a_partition_new_to_the_follower_ends_any_bulk_restore_first() -> None:
    """A partition whose bulk restore a rebalance stopped, now a standby here, leaves bulk
    mode before the follower's first write to it; one followed already is left as it is."""
    a, b = Store(0), Store(1)
    reader = Reader({A: log_of(2, "a"), B: log_of(2, "b")}, {A: 2, B: 2})
    follower = follower_with(reader)
    follower.follow({A: a})
    assert (a.bulk_ended, b.bulk_ended) == (0, 0)  # at the next turn, not in the rebalance
    turns(follower, 1)
    assert (a.bulk_ended, b.bulk_ended) == (1, 0) and a.written
    follower.follow({A: a, B: b})
    turns(follower, 1)
    assert (a.bulk_ended, b.bulk_ended) == (1, 1)
    follower.follow({B: b})
    follower.follow({A: a, B: b})  # A followed again after a rebalance away: new again
    turns(follower, 1)
    assert (a.bulk_ended, b.bulk_ended) == (2, 1)


def test_a_new_partition_is_written_only_once_its_store_has_compacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bulk restore compacts only at its end (tables/rocks.py): a partition whose restore a
    rebalance stopped is compacted before the follower's first write, which could stall on it."""
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    a = Store(0, compacting_answers=[True, True])
    follower = follower_with(Reader({A: log_of(2, "a")}, {A: 2}))
    follower.follow({A: a})
    turns(follower, 1)
    assert a.written_when_asked == [0, 0, 0] and len(a.written) == 2
    turns(follower, 1)
    assert len(a.written_when_asked) == 3  # settled once, not at every turn


def test_a_rebalance_while_a_store_compacts_starts_the_turn_over(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    a, b = Store(0, compacting_answers=[True] * 3), Store(1)
    follower = follower_with(Reader({A: log_of(2, "a"), B: log_of(2, "b")}, {A: 2, B: 2}))
    follower.follow({A: a})

    def rebalance_on_second_ask(partition: int) -> bool:
        if len(a.written_when_asked) == 2:
            follower.follow({A: a, B: b})
        return Store.compacting(a, partition)

    a.compacting = rebalance_on_second_ask  # type: ignore[method-assign]
    turns(follower, 1)
    assert a.written == [] and b.written == []  # the turn ended at the change, writing nothing
    turns(follower, 1)
    assert a.compacting_answers == [] and len(a.written) == 2 and len(b.written) == 2
