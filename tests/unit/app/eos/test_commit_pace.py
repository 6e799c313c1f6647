"""When the commit loop commits next (``app.eos.manager.next_commit_due``) and what counts as
caught up (``Task.caught_up``): the interval from a commit's start while no task is behind (as
Flink's checkpoint interval), from its end while one is (as Kafka Streams counts it)."""

from __future__ import annotations

from aiokafka.structs import TopicPartition

from app.eos import Task
from app.eos.manager import next_commit_due

INPUT = TopicPartition("events", 2)
REPARTITION = TopicPartition("app-events-repartition", 2)


def test_caught_up_the_interval_runs_from_the_commits_start() -> None:
    # A commit of 0.09 s with an interval of 0.1 s: the next starts 0.01 s after it ended.
    assert next_commit_due(10.0, 10.09, True, 0.1) == 10.1
    # One longer than the interval: the next starts at once (a due time already past).
    assert next_commit_due(10.0, 10.25, True, 0.1) < 10.25


def test_behind_the_interval_runs_from_the_commits_end() -> None:
    assert next_commit_due(10.0, 10.09, False, 0.1) == 10.09 + 0.1


def test_a_task_is_behind_while_a_fetch_left_records_at_the_broker() -> None:
    task = Task(2, "app-events-2")
    assert task.caught_up  # nothing fetched yet
    task.lag[INPUT] = 0
    task.lag[REPARTITION] = 1  # an upstream transaction's commit marker
    assert task.caught_up
    task.lag[INPUT] = 2
    assert not task.caught_up
