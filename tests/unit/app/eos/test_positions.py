"""Where tasks start after a rebalance (``app/eos/positions.py``): a raise to the store's source
offsets is confirmed in the changelog first, and a store holding a transaction the broker rolled
back is rebuilt instead. A fake broker and store: the real ones are in tests/faults (F6, F8b)."""

from __future__ import annotations

import asyncio

from aiokafka.structs import TopicPartition

from app.eos import Task
from app.eos.positions import confirm_stored_offsets

CHANGELOG = "app-seen_ids-changelog"


class Broker:
    """``first_committed_record`` over a changelog whose committed offsets are given."""

    def __init__(self, committed: set[int], error: BaseException | None = None) -> None:
        self.committed = committed
        self.error = error
        self.asked: list[tuple[TopicPartition, int, int]] = []

    async def first_committed_record(self, tp: TopicPartition, start: int, end: int) -> int | None:
        self.asked.append((tp, start, end))
        if self.error is not None:
            raise self.error
        return next((o for o in range(start, end) if o in self.committed), None)


class Store:
    def __init__(self, offsets: dict[int, dict[str, int]], at: dict[int, int | None]) -> None:
        self.offsets = offsets
        self.at = at

    def stage_source_offsets(self, partition: int, value: bytes) -> None:
        raise AssertionError("not used here")

    def source_offsets(self, partition: int) -> dict[str, int]:
        return self.offsets.get(partition, {})

    def source_offsets_at(self, partition: int) -> int | None:
        return self.at.get(partition)


def task(partition: int, start: int) -> Task:
    t = Task(partition, f"tx-{partition}")
    t.positions = {TopicPartition("in", partition): start}
    return t


def confirm(broker: Broker, store: Store, tasks: dict[int, Task]) -> tuple[list[int], list[int]]:
    rebuilt: list[int] = []
    returned = asyncio.run(
        confirm_stored_offsets(
            broker,  # type: ignore[arg-type]
            tasks,
            store,
            CHANGELOG,
            sorted(tasks),
            rebuilt.append,
        )
    )
    return returned, rebuilt


def test_a_raise_whose_record_is_committed_stands() -> None:
    broker = Broker(committed={41})
    store = Store({0: {"in": 473}}, {0: 41})
    assert confirm(broker, store, {0: task(0, 442)}) == ([], [])
    assert broker.asked == [(TopicPartition(CHANGELOG, 0), 41, 42)]


def test_a_raise_whose_record_did_not_commit_rebuilds_the_partition() -> None:
    broker = Broker(committed={40, 42})  # 41 aborted (or never written)
    store = Store({0: {"in": 473}, 1: {"in": 500}}, {0: 41, 1: 77})
    tasks = {0: task(0, 442), 1: task(1, 500)}
    assert confirm(broker, store, tasks) == ([0], [0])
    assert [a[0].partition for a in broker.asked] == [0]  # partition 1 raises nothing


def test_an_unanswered_check_rebuilds_rather_than_raises() -> None:
    broker = Broker(committed={41}, error=TimeoutError("no answer"))
    store = Store({0: {"in": 473}}, {0: 41})
    assert confirm(broker, store, {0: task(0, 442)}) == ([0], [0])


def test_offsets_restored_from_the_changelog_need_no_check() -> None:
    broker = Broker(committed=set())
    store = Store({0: {"in": 473}}, {0: None})
    assert confirm(broker, store, {0: task(0, 442)}) == ([], [])
    assert broker.asked == []


def test_no_raise_no_check() -> None:
    broker = Broker(committed=set())
    store = Store({0: {"in": 442}, 1: {"in": 10}}, {0: 41, 1: 9})
    assert confirm(broker, store, {0: task(0, 442), 1: task(1, 12)}) == ([], [])
    assert broker.asked == []
