"""A transaction the broker left open on a task's changelog partition is ended by committing
through it (``app/eos/hanging.py``), after a transaction timeout of waiting
(``assign_start_positions``): with the task's own producer id in a record-less transaction on
the old flow, or, for an older producer id (an epoch that ran out under transactions v2), with
markers written for that id. Fakes of the broker and the producers: the real ones are in
tests/faults (F8c, and the epoch-overflow row) and tests/integration."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from aiokafka.structs import TopicPartition

from app.eos import Task, TaskState
from app.eos.hanging import HangingTransactions, MarkersRefused, OpenTransaction
from app.eos.positions import assign_start_positions
from app.eos.txn_v2 import TransactionManagerV2

CHANGELOG = "app-seen_ids-changelog"


class Producer:
    """Records the transactions it is asked for: the partitions each one added. ``v2``: its
    transaction state is the v2 flow's (it cannot add a partition without a record)."""

    def __init__(
        self, error: BaseException | None = None, producer_id: int = 7, v2: bool = False
    ) -> None:
        self.error = error
        self.adding: list[TopicPartition] = []
        self.committed: list[list[TopicPartition]] = []
        self.started = False
        if v2:
            self._txn_manager: Any = TransactionManagerV2("tx", 1000)
            self._txn_manager.set_pid_and_epoch(producer_id, 3)
        else:
            self._txn_manager = SimpleNamespace(
                maybe_add_partition_to_txn=self.adding.append,
                producer_id=producer_id,
                producer_epoch=3,
            )

    async def start(self) -> None:
        self.started = True

    async def begin_transaction(self) -> None:
        self.adding.clear()

    async def commit_transaction(self) -> None:
        if self.error is not None:
            raise self.error
        self.committed.append(list(self.adding))


class Producers:
    """``TransactionalProducers``: old-flow sessions and restarted v2 producers."""

    def __init__(self) -> None:
        self.sessions: list[Producer] = []
        self.started: list[Producer] = []
        self.closed: list[Producer] = []

    def new(self, partition: int, *, old_flow: bool = False) -> Producer:
        assert old_flow, "only the repair's session is made here"
        session = Producer()
        self.sessions.append(session)
        return session

    async def start(self, partition: int) -> Producer:
        producer = Producer(v2=True)
        self.started.append(producer)
        return producer

    async def close(self, producer: Producer) -> None:
        self.closed.append(producer)


class Markers:
    """The partition leaders: the transactions open on each partition, and the markers
    written."""

    def __init__(self, open_txns: list[OpenTransaction], refuse: bool = False) -> None:
        self.open = open_txns
        self.refuse = refuse
        self.asked: list[list[TopicPartition]] = []
        self.committed: list[OpenTransaction] = []

    async def open_transactions(self, tps: list[TopicPartition]) -> list[OpenTransaction]:
        self.asked.append(tps)
        return [t for t in self.open if t.tp in tps]

    async def commit(self, transactions: list[OpenTransaction]) -> None:
        if self.refuse:
            raise MarkersRefused("no Alter on the cluster")
        self.committed += transactions


def task(partition: int, producer: Producer) -> Task:
    return Task(partition, f"tx-{partition}", producer)  # type: ignore[arg-type]


def written_by(p: int) -> list[TopicPartition]:
    return [TopicPartition(CHANGELOG, p), TopicPartition("out", 0), TopicPartition("out", 1)]


def held(tp: TopicPartition, producer_id: int) -> OpenTransaction:
    return OpenTransaction(tp, producer_id, 5, 2, 100)


async def run_commit_through(
    tasks: dict[int, Task],
    hanging: list[TopicPartition],
    markers: Markers | None = None,
    producers: Producers | None = None,
) -> tuple[list[int], list[tuple[int, BaseException]]]:
    failures: list[tuple[int, BaseException]] = []
    repair = HangingTransactions(
        producers or Producers(),  # type: ignore[arg-type]
        markers or Markers([]),
        written_by,
        lambda t, e: failures.append((t.partition, e)),
    )
    done = await repair.commit_through(tasks, hanging)
    return done, failures


async def test_the_task_commits_through_its_partition_and_every_partition_it_writes() -> None:
    p0, p1 = Producer(), Producer()
    tasks = {0: task(0, p0), 1: task(1, p1)}
    markers = Markers([held(TopicPartition(CHANGELOG, 1), 7)])
    assert await run_commit_through(tasks, [TopicPartition(CHANGELOG, 1)], markers) == ([1], [])
    assert p0.committed == []
    assert p1.committed == [
        [TopicPartition(CHANGELOG, 1), TopicPartition("out", 0), TopicPartition("out", 1)]
    ]
    assert markers.committed == []  # its own id: no marker written for another


async def test_a_v2_task_commits_through_in_a_session_of_its_own_on_the_old_flow() -> None:
    """Under transactions v2 only a record adds a partition, so the record-less commit runs in
    a producer session on the old flow (AddPartitionsToTxn, EndTxn v0): the v2 producer is
    closed before it and a new one started after, never one transaction mixing the two."""
    v2 = Producer(v2=True)
    tasks = {0: task(0, v2)}
    producers = Producers()
    markers = Markers([held(TopicPartition(CHANGELOG, 0), 7)])
    done = await run_commit_through(tasks, [TopicPartition(CHANGELOG, 0)], markers, producers)
    assert done == ([0], [])
    assert v2.committed == []
    [session] = producers.sessions
    assert session.started and session.committed == [written_by(0)]
    assert producers.closed == [v2, session]
    assert tasks[0].producer is producers.started[0]


async def test_an_older_producer_id_gets_markers_written_for_it() -> None:
    """The epoch ran out and the coordinator handed the transactional id a new producer id:
    no producer can end what the old id left open, markers written for it can, on every
    partition the task writes where that id holds a transaction open."""
    v2 = Producer(v2=True, producer_id=9)
    tasks = {0: task(0, v2)}
    old_changelog = held(TopicPartition(CHANGELOG, 0), 7)
    old_out = held(TopicPartition("out", 1), 7)
    stranger = held(TopicPartition("out", 0), 3)  # another task's id: not ours to end
    markers = Markers([old_changelog, old_out, stranger])
    producers = Producers()
    done = await run_commit_through(tasks, [TopicPartition(CHANGELOG, 0)], markers, producers)
    assert done == ([0], [])
    assert markers.committed == [old_changelog, old_out]
    assert producers.sessions == [] and tasks[0].producer is v2  # nothing of its own to end


async def test_markers_refused_for_an_older_id_leave_it_waiting_not_failed() -> None:
    """Without Alter on the cluster the broker refuses the markers: the task is not failed
    (a re-read would meet the same transaction); the worker says what to grant and waits."""
    tasks = {0: task(0, Producer(v2=True, producer_id=9))}
    markers = Markers([held(TopicPartition(CHANGELOG, 0), 7)], refuse=True)
    assert await run_commit_through(tasks, [TopicPartition(CHANGELOG, 0)], markers) == ([], [])
    assert tasks[0].state is TaskState.RUNNING


async def test_nothing_found_open_any_more_is_committed_through_by_the_task() -> None:
    p0 = Producer()
    tasks = {0: task(0, p0)}
    assert await run_commit_through(tasks, [TopicPartition(CHANGELOG, 0)]) == ([0], [])
    assert p0.committed == [written_by(0)]


async def test_a_failed_commit_is_reported_and_the_others_go_on() -> None:
    error = RuntimeError("EndTxn timed out")
    p0, p1 = Producer(error), Producer()
    tasks = {0: task(0, p0), 1: task(1, p1)}
    hanging = [TopicPartition(CHANGELOG, 0), TopicPartition(CHANGELOG, 1)]
    assert await run_commit_through(tasks, hanging) == ([1], [(0, error)])


async def test_tasks_that_stopped_or_already_write_are_left_alone() -> None:
    fenced, writing, gone = Producer(), Producer(), Producer()
    tasks = {0: task(0, fenced), 1: task(1, writing)}
    tasks[0].state = TaskState.FENCED
    tasks[1].in_transaction = True  # its own commit writes the markers
    hanging = [TopicPartition(CHANGELOG, p) for p in (0, 1, 2)]
    assert await run_commit_through(tasks, hanging) == ([], [])
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
