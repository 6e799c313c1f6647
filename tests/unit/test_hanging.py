"""A transaction the broker left open on a task's changelog partition is ended by committing
through it (``app/eos/hanging.py``), after a transaction timeout of waiting
(``assign_start_positions``). Fakes of the broker and the producer: the real ones are in
tests/faults (F8c)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.structs import TopicPartition

from app.eos import Task, TaskState
from app.eos.hanging import commit_through
from app.eos.positions import assign_start_positions

CHANGELOG = "app-seen_ids-changelog"


class Producer:
    """Records the transactions it is asked for: the partitions each one added."""

    def __init__(self, error: BaseException | None = None) -> None:
        self.error = error
        self.adding: list[TopicPartition] = []
        self.committed: list[list[TopicPartition]] = []
        self._txn_manager = SimpleNamespace(maybe_add_partition_to_txn=self.adding.append)

    async def begin_transaction(self) -> None:
        self.adding.clear()

    async def commit_transaction(self) -> None:
        if self.error is not None:
            raise self.error
        self.committed.append(list(self.adding))


def task(partition: int, producer: Producer) -> Task:
    return Task(partition, f"tx-{partition}", producer)


def written_by(p: int) -> list[TopicPartition]:
    return [TopicPartition(CHANGELOG, p), TopicPartition("out", 0), TopicPartition("out", 1)]


def run_commit_through(
    tasks: dict[int, Task], hanging: list[TopicPartition]
) -> tuple[list[int], list[tuple[int, BaseException]]]:
    failures: list[tuple[int, BaseException]] = []
    done = asyncio.run(
        commit_through(tasks, hanging, written_by, lambda t, e: failures.append((t.partition, e)))
    )
    return done, failures


def test_the_task_commits_through_its_partition_and_every_partition_it_writes() -> None:
    p0, p1 = Producer(), Producer()
    tasks = {0: task(0, p0), 1: task(1, p1)}
    assert run_commit_through(tasks, [TopicPartition(CHANGELOG, 1)]) == ([1], [])
    assert p0.committed == []
    assert p1.committed == [
        [TopicPartition(CHANGELOG, 1), TopicPartition("out", 0), TopicPartition("out", 1)]
    ]


def test_a_failed_commit_is_reported_and_the_others_go_on() -> None:
    error = RuntimeError("EndTxn timed out")
    p0, p1 = Producer(error), Producer()
    tasks = {0: task(0, p0), 1: task(1, p1)}
    hanging = [TopicPartition(CHANGELOG, 0), TopicPartition(CHANGELOG, 1)]
    assert run_commit_through(tasks, hanging) == ([1], [(0, error)])


def test_tasks_that_stopped_or_already_write_are_left_alone() -> None:
    fenced, writing, gone = Producer(), Producer(), Producer()
    tasks = {0: task(0, fenced), 1: task(1, writing)}
    tasks[0].state = TaskState.FENCED
    tasks[1].in_transaction = True  # its own commit writes the markers
    hanging = [TopicPartition(CHANGELOG, p) for p in (0, 1, 2)]
    assert run_commit_through(tasks, hanging) == ([], [])
    assert fenced.committed == writing.committed == gone.committed == []


class Broker:
    """Changelog partitions that stay open until ``end_hanging`` ran; no group offsets."""

    def __init__(self, open_until_ended: set[int]) -> None:
        self.open = open_until_ended
        self.settings = SimpleNamespace(transaction_timeout=15.0)
        self.waits: list[tuple[list[int], float | None]] = []

    async def wait_until_settled(
        self, tps: list[TopicPartition], give_up_after: float | None = None
    ) -> list[TopicPartition]:
        self.waits.append(([tp.partition for tp in tps], give_up_after))
        still = [tp for tp in tps if tp.partition in self.open]
        assert give_up_after is not None or not still, "would wait forever"
        return still

    async def committed_offsets_retrying(self, tps: list[TopicPartition]) -> dict[Any, int]:
        return {tp: 5 for tp in tps}

    async def start_offsets(self, tps: list[Any], committed: dict[Any, int]) -> dict[Any, int]:
        return dict(committed)


def assign(broker: Broker, tasks: dict[int, Task], end_hanging: Any) -> None:
    asyncio.run(
        assign_start_positions(
            broker,  # type: ignore[arg-type]
            tasks,
            ["in"],
            sorted(tasks),
            CHANGELOG,
            end_hanging,
        )
    )


def test_a_partition_still_open_after_the_transaction_timeout_is_ended_then_awaited() -> None:
    broker = Broker(open_until_ended={1})
    tasks = {0: task(0, Producer()), 1: task(1, Producer())}
    ended: list[list[TopicPartition]] = []

    async def end_hanging(tps: list[TopicPartition]) -> None:
        ended.append(tps)
        broker.open.clear()

    assign(broker, tasks, end_hanging)
    assert ended == [[TopicPartition(CHANGELOG, 1)]]
    assert broker.waits == [([0, 1], 15.0), ([0, 1], None)]
    assert tasks[1].positions == {TopicPartition("in", 1): 5}


def test_a_task_that_failed_ending_it_is_not_awaited() -> None:
    broker = Broker(open_until_ended={1})
    tasks = {0: task(0, Producer()), 1: task(1, Producer())}

    async def end_hanging(tps: list[TopicPartition]) -> None:
        tasks[1].state = TaskState.FAILED  # the rejoin re-reads it

    assign(broker, tasks, end_hanging)
    assert broker.waits == [([0, 1], 15.0), ([0], None)]


def test_settled_partitions_are_not_ended() -> None:
    broker = Broker(open_until_ended=set())
    tasks = {0: task(0, Producer())}

    async def end_hanging(tps: list[TopicPartition]) -> None:
        raise AssertionError("nothing hangs")

    assign(broker, tasks, end_hanging)
    assert broker.waits == [([0], 15.0)]
