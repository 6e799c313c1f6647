"""The fault tests' fault points (``app/fault_injection.py``): the plan, and the actions that
wrap the commit request and the batch handler (on the fake producer of
tests/unit/commit_fakes.py)."""

from __future__ import annotations

import asyncio
import os
import signal
from dataclasses import dataclass

import pytest
from aiokafka.structs import TopicPartition

from app import fault_injection as faults
from app.eos import Outcome, Task
from app.factory import fault_points
from app.fault_points import NO_FAULTS
from recovery.reader import Fetched
from tests.unit.commit_fakes import SOURCE, setup


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
        fault_points()


def test_the_factory_picks_the_test_points_only_when_the_variable_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("DEDUPE_FAULT_INJECTION", raising=False)
    assert fault_points() is NO_FAULTS
    monkeypatch.setenv("DEDUPE_FAULT_INJECTION", "")
    assert fault_points() is NO_FAULTS
    monkeypatch.setenv("DEDUPE_FAULT_INJECTION", "commit=kill@3")
    points = fault_points()
    assert isinstance(points, faults.InjectedFaults)
    assert (points.plan.point, points.plan.action, points.plan.at) == ("commit", "kill", 3)


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


async def test_lose_request_is_an_unknown_outcome_that_did_not_commit() -> None:
    points = injected("commit=lose-request@1")
    committer, task, producer, _, broker, _ = setup(committed={SOURCE: 10}, points=points)
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED and result.reason == "unknown_outcome"
    assert "commit" not in producer.calls and "abort" not in producer.calls
    assert broker.asked == [[SOURCE]]  # the outcome was asked of the broker


async def test_lose_response_sends_the_request_and_then_asks_the_broker() -> None:
    points = injected("commit=lose-response@1")
    committer, task, producer, _, broker, _ = setup(committed={SOURCE: 12}, points=points)
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert producer.calls[-1] == "commit" and "abort" not in producer.calls
    assert broker.asked == [[SOURCE]]


async def test_roll_back_aborts_yet_reports_committed(monkeypatch: pytest.MonkeyPatch) -> None:
    killed: list[int] = []
    monkeypatch.setattr(os, "kill", lambda pid, sig: killed.append(sig))
    points = injected("commit=roll-back@1")
    committer, task, producer, _, broker, _ = setup(points=points)
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert "commit" not in producer.calls and producer.calls[-1] == "abort"
    assert broker.asked == []
    assert points.plan.rolled_back == 3
    points.applied(3)
    assert killed == [signal.SIGKILL]


async def test_pause_holds_the_commit_request(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(faults, "PAUSE_SECONDS", 0.2)
    committer, task, producer, _, _, _ = setup(points=injected("commit=pause@1"))
    started = asyncio.get_running_loop().time()
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED and producer.calls[-1] == "commit"
    assert asyncio.get_running_loop().time() - started >= 0.2


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
