"""The fault tests' seams: the plan (``app/faults/injection.py``), the producers and collectors
of their client supplier (``app/faults/producers.py``: the commit's actions on the fake producer
of tests/unit/app/eos/commit_fakes.py, the record's ``stored`` and ``sent`` on a watched
collector) and the batch handler's ``skip-fetched``."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

import pytest
from aiokafka.structs import TopicPartition

from app.eos import Outcome, Task, TaskTransaction
from app.eos.producer import TransactionalProducers
from app.faults import injection as faults
from app.faults import producers as fault_producers
from app.faults.points import NO_FAULTS
from app.faults.producers import CommitFaults, FaultProducer, FaultProducers, WatchedCollector
from app.settings import Settings
from app.worker.factory import fault_seams
from recovery.reader import Fetched
from tests.unit.app.eos.commit_fakes import CHANGELOG, OUT, SOURCE, Builder, Producer, setup

SETTINGS = Settings.from_env({"DEDUPE_APP_ID": "shop", "DEDUPE_INPUT_TOPIC": "orders"})


@pytest.mark.parametrize(
    "spec, point, action, at",
    [
        ("commit=lose-response@5", "commit", "lose-response", 5),
        ("commit=lose-request@1", "commit", "lose-request", 1),
        ("commit=pause@1", "commit", "pause", 1),
        ("commit=roll-back@30", "commit", "roll-back", 30),
        ("processed=kill@100", "processed", "kill", 100),
        ("committed=kill@2", "committed", "kill", 2),
        ("assigned=term@1", "assigned", "term", 1),
        ("processed=skip-fetched@200", "processed", "skip-fetched", 200),
        ("restoring=hold@1", "restoring", "hold", 1),
    ],
)
def test_parse(spec: str, point: str, action: str, at: int) -> None:
    plan = faults.parse(spec)
    assert plan is not None
    assert (plan.point, plan.action, plan.at) == (point, action, at)


@pytest.mark.parametrize(
    "spec",
    [
        "commit",
        "commit=kill",
        "nowhere=kill@1",
        "commit=explode@1",
        "processed=lose-request@1",
        "commit=skip-fetched@1",
        "sent=pause@1",
        "committed=roll-back@1",
        "recovering=hold@1",
        "commit=hold@1",
    ],
)
def test_malformed_plans_are_refused_at_start_up(
    spec: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValueError):
        faults.parse(spec)
    monkeypatch.setenv("DEDUPE_FAULT_INJECTION", spec)
    with pytest.raises(ValueError, match="DEDUPE_FAULT_INJECTION"):
        fault_seams()


async def test_the_factory_picks_the_test_seams_only_when_the_variable_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEDUPE_FAULT_INJECTION", raising=False)
    assert fault_seams() == (NO_FAULTS, TransactionalProducers)
    monkeypatch.setenv("DEDUPE_FAULT_INJECTION", "")
    assert fault_seams() == (NO_FAULTS, TransactionalProducers)
    monkeypatch.setenv("DEDUPE_FAULT_INJECTION", "commit=kill@3")
    points, supplier = fault_seams()
    assert isinstance(points, faults.InjectedFaults)
    assert (points.plan.point, points.plan.action, points.plan.at) == ("commit", "kill", 3)
    # The supplier's clients act on the same plan: a fault producer, a watched collector.
    producers = supplier(SETTINGS, lambda: False)
    assert isinstance(producers, FaultProducers) and producers.plan is points.plan
    producer = producers.new(2)
    assert isinstance(producer, FaultProducer) and producer.plan is points.plan
    assert (producer.partition, producer._txn_manager.transactional_id) == (2, "shop-orders-2")
    collector = producers.collector()
    assert isinstance(collector, WatchedCollector)
    assert collector.output_topic == SETTINGS.output_topic


def test_empty_means_no_faults() -> None:
    assert faults.parse("") is None


def test_a_plan_fires_once_at_the_nth_visit_of_its_point() -> None:
    plan = faults.parse("commit=lose-response@3")
    assert plan is not None
    seen = [plan.reach(p) for p in ["commit", "processed", "commit", "commit", "commit"]]
    assert seen == [None, None, None, "lose-response", None]


def test_a_roll_back_kills_the_worker_once_the_stores_applied_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    plan = faults.parse("commit=roll-back@2")
    assert plan is not None
    plan.after_applied(1)  # an earlier commit: nothing
    assert [plan.reach("commit"), plan.reach("commit")] == [None, "roll-back"]
    plan.after_applied(2)  # another partition's commit, while the roll-back runs: nothing
    assert killed == []
    plan.rolled_back = 1  # the committer, once it aborted and reports the commit
    plan.after_applied(1)
    assert killed == [signal.SIGKILL]


def injected(spec: str) -> faults.InjectedFaults:
    plan = faults.parse(spec)
    assert plan is not None
    return faults.InjectedFaults(plan)


class FaultFake(CommitFaults, Producer):
    """The fake producer with the fault tests' commit actions mixed in, as the fault tests'
    supplier mixes them into aiokafka's."""


def fault_producer(spec: str) -> FaultFake:
    plan = faults.parse(spec)
    assert plan is not None
    return FaultFake(plan, 3)


async def test_lose_request_is_an_unknown_outcome_that_did_not_commit() -> None:
    producer = fault_producer("commit=lose-request@1")
    committer, task, _, _, broker, _ = setup(committed={SOURCE: 10}, producer=producer)
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED and result.reason == "unknown_outcome"
    assert "commit" not in producer.calls and "abort" not in producer.calls
    assert broker.asked == [[SOURCE]]  # the outcome was asked of the broker


async def test_lose_response_sends_the_request_and_then_asks_the_broker() -> None:
    producer = fault_producer("commit=lose-response@1")
    committer, task, _, _, broker, _ = setup(committed={SOURCE: 12}, producer=producer)
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert producer.calls[-1] == "commit" and "abort" not in producer.calls
    assert broker.asked == [[SOURCE]]


async def test_roll_back_aborts_yet_reports_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    producer = fault_producer("commit=roll-back@1")
    committer, task, _, _, broker, _ = setup(producer=producer)
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert "commit" not in producer.calls and producer.calls[-1] == "abort"
    assert broker.asked == []
    assert producer.plan.rolled_back == 3
    faults.InjectedFaults(producer.plan).applied(3)  # the stores applied it: the kill
    assert killed == [signal.SIGKILL]


async def test_pause_holds_the_commit_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fault_producers, "PAUSE_SECONDS", 0.2)
    producer = fault_producer("commit=pause@1")
    committer, task, *_ = setup(producer=producer)
    committer.timeout = 1.0  # the pause counts within the commit's timeout
    started = asyncio.get_running_loop().time()
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED and producer.calls[-1] == "commit"
    assert asyncio.get_running_loop().time() - started >= 0.2


@pytest.mark.parametrize("point", ["commit", "committed"])
async def test_kill_at_a_commit_point(point: str, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    producer = fault_producer(f"{point}=kill@2")
    monkeypatch.setattr(os, "kill", lambda pid, sig: calls.append(f"kill {sig}"))
    producer.calls = calls
    for _ in range(2):
        committer, task, *_ = setup(producer=producer)
        assert (await committer.commit(task)).outcome is Outcome.COMMITTED
    kill = f"kill {signal.SIGKILL}"
    # commit: before the second commit request goes out; committed: once it returned.
    assert calls[-2:] == ([kill, "commit"] if point == "commit" else ["commit", kill])
    assert calls.count("commit") == 2


async def test_a_record_less_commit_reaches_no_point(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    producer = fault_producer("commit=kill@1")
    await producer.commit_transaction()  # no offsets joined: the markers of hanging.py
    assert killed == [] and producer.calls == ["commit"]
    await producer.send_offsets_to_transaction({SOURCE: 5}, "app")
    await producer.abort_transaction()  # aborted: the next commit is record-less again
    await producer.commit_transaction()
    assert killed == []
    await producer.send_offsets_to_transaction({SOURCE: 5}, "app")
    await producer.commit_transaction()
    assert killed == [signal.SIGKILL]


class Watched(Producer):
    """The fake producer with batches small enough to fill (``room`` records each)."""

    def __init__(self, room: int) -> None:
        super().__init__()
        self.room = room

    def create_batch(self) -> Builder:
        builder = Builder()
        append = builder.append

        def bounded(**record: object) -> object:
            return None if len(builder.records) >= self.room else append(**record)  # type: ignore[arg-type]

        builder.append = bounded  # type: ignore[method-assign]
        return builder


@pytest.mark.parametrize("point", ["stored", "sent"])
async def test_stored_and_sent_are_each_output_record_s_send(
    point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Once per output record, across full batches; never for another topic's record."""
    plan = faults.parse(f"{point}=kill@5")
    assert plan is not None
    producer = Watched(room=2)
    collector = WatchedCollector(plan, OUT.topic)
    task = Task(3, "app-events-3", producer=producer, collector=collector)  # type: ignore[arg-type]
    txn = TaskTransaction(task)
    outputs: list[bytes] = []
    monkeypatch.setattr(
        os, "kill", lambda pid, sig: outputs.append(b"killed with %d in" % len(appended()))
    )

    def appended() -> list[bytes | None]:
        batches = [b for tp, b in collector.open_batches().items() if tp == OUT]
        return [r for b in batches for r in b.records] + [b"x"] * sum(
            n for t, _, n in producer.sent if t == OUT.topic
        )

    for i in range(6):
        for topic in (CHANGELOG.topic, "dead-letters"):  # never watched
            await txn.send(
                topic, key=b"k", value=b"v", headers=None, timestamp_ms=None, partition=3
            )
        await txn.send(
            OUT.topic, key=b"k", value=b"%d" % i, headers=None, timestamp_ms=None, partition=3
        )
    # The 5th output record: stored before it is in a batch, sent once it is.
    assert outputs == [b"killed with %d in" % (4 if point == "stored" else 5)]


class Source:
    """The changelog reader: fetches that bring ``sizes`` records, one after the other."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = list(sizes)

    async def fetch(
        self, tp: TopicPartition, offset: int, end: int, *, max_wait_ms: int | None = None
    ) -> Fetched:
        return Fetched(records=[(b"k", b"v")] * self.sizes.pop(0), next_offset=offset + 1)

    async def close(self) -> None:
        pass


async def test_hold_keeps_each_partition_s_first_fetch_with_records_from_the_restorer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(faults, "HOLD_SECONDS", 0.3)
    source = injected("restoring=hold@2").restore_source(Source(5, 0, 5, 5, 5, 5))
    clock = asyncio.get_running_loop().time
    took = []
    for partition in (0, 0, 0, 0, 1, 1):
        started = clock()
        await source.fetch(TopicPartition("c", partition), 0, 10)
        took.append(clock() - started)
    # The first fetch with records is the first visit, an empty one none; the second visit
    # waits, the next of that partition goes at once, the first of the next partition waits.
    assert [t >= 0.3 for t in took] == [False, False, True, False, True, False]
    assert NO_FAULTS.restore_source(reader := Source()) is reader


TP = TopicPartition("events", 0)


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int


class Handled:
    """The batch handler: processes every record (its task's position moves past it) except
    those at ``dropped`` offsets (as a record delivered again is)."""

    def __init__(self, task: Task, dropped: frozenset[int] = frozenset()) -> None:
        self.task = task
        self.dropped = dropped
        self.batches: list[list[int]] = []

    async def __call__(self, messages: list[Msg], generation_id: int) -> None:
        self.batches.append([m.offset for m in messages])
        for m in messages:
            if m.offset not in self.dropped:
                self.task.positions[TP] = m.offset + 1


def skipping_handler(
    spec: str, task: Task, handled: Handled, end: int = 50
) -> tuple[faults.InjectedFaults, list[tuple[TopicPartition, int]], object]:
    points = injected(spec)
    seeks: list[tuple[TopicPartition, int]] = []

    async def end_of(tp: TopicPartition) -> int:
        return end

    async def seek(tp: TopicPartition, position: int) -> None:
        seeks.append((tp, position))

    wrapped = points.batch_handler(handled, {0: task}, end_of, seek)  # type: ignore[arg-type]
    return points, seeks, wrapped


async def test_skip_fetched_drops_the_rest_of_the_batch_and_later_fetches_below_the_end() -> None:
    task = Task(0, "app-events-0")
    handled = Handled(task, dropped=frozenset({11}))
    points, seeks, wrapped = skipping_handler("processed=skip-fetched@2", task, handled)
    await wrapped([Msg("events", 0, o) for o in (10, 11, 12, 13, 14)], 1)  # type: ignore[operator]
    # One record per call until the point fires: 11 was not processed, 12 is the second.
    assert handled.batches == [[10], [11], [12]]
    assert seeks == [(TP, 50)]
    await wrapped([Msg("events", 0, o) for o in (48, 49, 50, 51)], 1)  # type: ignore[operator]
    assert handled.batches[-1] == [50, 51]  # whole batches again once the point fired
    await wrapped([Msg("events", 0, o) for o in (15, 16)], 1)  # type: ignore[operator]
    assert handled.batches[-1] == [50, 51]  # all below the end: no call at all
    points.seeked_back(TP)  # the stall watchdog brings them back
    await wrapped([Msg("events", 0, o) for o in (13, 14)], 1)  # type: ignore[operator]
    assert handled.batches[-1] == [13, 14]


async def test_production_points_hand_the_handler_over_unchanged() -> None:
    handled = Handled(Task(0, "app-events-0"))

    async def unused(*args: object) -> int:
        raise AssertionError

    assert NO_FAULTS.batch_handler(handled, {}, unused, unused) is handled
