"""``tables.producers.ProducerSeqs`` on a real RocksDB store: repeats at or below the highest
sequence, gaps, idle and size-cap age-out (least recently active first), aborts that reload the
live set from the committed state, and a rebuild from the changelog that decides the same."""

from __future__ import annotations

import types
from collections.abc import AsyncIterator
from pathlib import Path

import faust
import pytest

from app.settings import Settings
from tables.producers import ProducerSeqs, ProducerState
from tables.store import TransactionalStore

IDLE_MS = 10_000


class StoreTable:
    """What ProducerSeqs needs of its table over a real store; records the changelog."""

    def __init__(self, store: TransactionalStore) -> None:
        self.store = store
        self.changelog: list[tuple[bytes, bytes | None]] = []

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        return self.store.get_in(partition or 0, key)

    def put(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        self.store.stage(partition or 0, key, value)
        self.changelog.append((key, value))


class World:
    def __init__(self, tmp_path: Path, cap: int = 3) -> None:
        self.app = faust.App("t-producers", store="rocksdb://", datadir=str(tmp_path))
        self.stores: list[TransactionalStore] = []
        self.settings = Settings.from_env(
            {"DEDUPE_PRODUCER_IDLE": f"{IDLE_MS}ms", "DEDUPE_MAX_PRODUCERS_PER_PARTITION": str(cap)}
        )
        self.table, self.seqs = self.new("producer_seqs")
        self.offset = 0

    def new(self, name: str) -> tuple[StoreTable, ProducerSeqs]:
        store = TransactionalStore(
            "rocksdb://",
            self.app,
            types.SimpleNamespace(name=name),
            partition_of=lambda: 0,
            table_name=name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.stores.append(store)
        table = StoreTable(store)
        return table, ProducerSeqs(table, self.settings)  # type: ignore[arg-type]

    def send(self, producer: str, seq: int, t: int) -> bool:
        return self.seqs.advance(producer.encode(), seq, t, 0)

    def commit(self) -> None:
        self.offset += 1
        self.table.store.commit_partition(0, self.offset)
        self.seqs.commit_partition(0, self.offset)

    def abort(self) -> None:
        self.table.store.discard_partition(0)
        self.seqs.discard_partition(0)

    def held(self, store: TransactionalStore | None = None) -> dict[bytes, ProducerState]:
        s = store or self.table.store
        return {k: ProducerState.decode(v) for k, v in s.db(0).items()}


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    w = World(tmp_path)
    yield w
    for store in w.stores:
        await store.on_stop()


def test_at_or_below_the_highest_sequence_is_a_repeat_and_gaps_are_allowed(world: World) -> None:
    assert [world.send("p", s, 1_000 + s) for s in (0, 1, 1, 0, 5, 3, 6)] == [
        True,
        True,
        False,
        False,
        True,  # a gap (2..4): allowed
        False,  # below the highest: a repeat even though 3 was never seen
        True,
    ]
    world.commit()
    assert world.held() == {b"p": ProducerState(6, 1_006)}
    assert world.seqs.committed(0, b"p") == ProducerState(6, 1_006)
    assert world.seqs.committed(0, b"q") is None


def test_producers_are_independent(world: World) -> None:
    assert world.send("a", 10, 1)
    assert world.send("b", 1, 2)  # another producer's lower sequence
    assert not world.send("a", 10, 3)
    assert world.send("b", 2, 4)


def test_an_aborted_transaction_leaves_the_committed_sequence(world: World) -> None:
    assert world.send("p", 1, 1_000)
    world.commit()
    assert world.send("p", 2, 1_001)
    world.abort()  # the record with 2 was never forwarded
    assert world.send("p", 2, 1_002)  # so its redelivery is forwarded
    assert not world.send("p", 1, 1_003)


def test_idle_producers_are_forgotten_by_record_time(world: World) -> None:
    assert world.send("old", 7, 1_000)
    assert world.send("busy", 1, 1_000)
    world.commit()
    assert world.send("busy", 2, 1_000 + IDLE_MS - 1)
    assert b"old" in world.seqs._active[0]  # not idle yet
    assert world.send("busy", 3, 1_000 + IDLE_MS)  # "old" is idle for IDLE_MS now
    world.commit()
    assert set(world.held()) == {b"busy"}
    assert world.seqs.status(0)["producers_expired"] == 1
    assert world.send("old", 7, 1_000 + IDLE_MS + 1)  # forgotten: forwarded again


def test_over_the_cap_the_least_recently_active_goes_first(world: World) -> None:
    for i, name in enumerate(("a", "b", "c")):
        assert world.send(name, 1, 1_000 + i)
    assert world.send("a", 2, 1_100)  # a is active again: b is now the least recent
    assert world.send("d", 1, 1_101)
    world.commit()
    assert set(world.held()) == {b"a", b"c", b"d"}
    assert world.seqs.status(0) == {
        "producers_held": 3,
        "producers_expired": 0,
        "producers_evicted": 1,
    }


async def test_a_rebuild_from_the_changelog_decides_the_same(world: World) -> None:
    sends = [("a", 1, 1_000), ("b", 1, 1_001), ("a", 1, 1_002), ("c", 4, 1_003), ("d", 1, 1_004)]
    for name, seq, t in sends:
        world.send(name, seq, t)
    world.commit()
    table2, seqs2 = world.new("rebuilt")
    for key, value in world.table.changelog:
        table2.store.stage(0, key, value)
    table2.store.commit_partition(0, 1)
    assert world.held(table2.store) == world.held()
    later = [("b", 1, 20_000), ("a", 2, 20_001), ("e", 1, 20_002), ("c", 4, 20_003)]
    assert [seqs2.advance(n.encode(), s, t, 0) for n, s, t in later] == [
        world.send(n, s, t) for n, s, t in later
    ]
