"""The exactly-once worker's batch path, in memory: which records of a batch count as processed
(``TaskBatch.records``), the commit's check of the sends (``delivered``), and the partition a
table write goes to while a batch is processed. The consumer side and the whole path on a real
broker are covered by tests/integration and tests/faults (every exactly-once worker runs it)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from app.eos import (
    Task,
    TaskBatch,
    TaskState,
    TaskTransactionManager,
    batch_partition,
    delivered,
)
from tables.transactional import current_partition


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    generation_id: int = 1


class FakeManager:
    """What ``TaskBatch.records`` reads of the manager: the app's flow and generation, the
    sequence check, the fault hook and the first-offset log."""

    def __init__(self, rejected: set[int] = frozenset()) -> None:  # type: ignore[assignment]
        self.flow = True
        self.app = SimpleNamespace(
            flow_control=SimpleNamespace(is_active=lambda: self.flow), consumer_generation_id=1
        )
        self.faults = None
        self.first_offsets: dict[TopicPartition, int] = {}
        self.rejected = rejected

    async def _in_sequence(self, task: Task, message: Msg) -> bool:
        return message.offset not in self.rejected

    _processed = TaskTransactionManager._processed  # the real bookkeeping


def batch(manager: FakeManager, offsets: list[int], **kw: Any) -> tuple[Task, TaskBatch]:
    task = Task(3, "txn-3")
    messages = [Msg("events", 3, o, **kw) for o in offsets]
    return task, TaskBatch(manager, task, messages)  # type: ignore[arg-type]


TP = TopicPartition("events", 3)


async def test_a_record_counts_once_the_loop_body_finished() -> None:
    task, b = batch(FakeManager(), [10, 11, 12])
    seen = []
    async for m in b.records():
        # while the body runs, the record's offset is not in the transaction yet
        assert task.offsets.get(TP, 10) == m.offset
        seen.append(m.offset)
    assert seen == [10, 11, 12]
    assert task.offsets[TP] == task.positions[TP] == 13
    assert task.records == 3


async def test_a_body_that_raises_leaves_the_record_out() -> None:
    task, b = batch(FakeManager(), [10, 11, 12])
    with pytest.raises(RuntimeError):
        async for m in b.records():
            if m.offset == 11:
                raise RuntimeError("record 11 failed")
    assert task.offsets[TP] == 11  # 10 processed, 11 not
    assert task.records == 1


async def test_records_the_sequence_check_rejects_are_skipped() -> None:
    task, b = batch(FakeManager(rejected={11}), [10, 11, 12])
    assert [m.offset async for m in b.records()] == [10, 12]
    assert task.records == 2


async def test_a_stopped_flow_or_a_new_generation_ends_the_batch() -> None:
    manager = FakeManager()
    task, b = batch(manager, [10, 11, 12])
    got = []
    async for m in b.records():
        got.append(m.offset)
        manager.flow = False  # a rebalance began while record 10 was processed
    assert got == [10]
    assert task.offsets[TP] == 11

    manager = FakeManager()
    manager.app.consumer_generation_id = 2
    task, b = batch(manager, [10, 11], generation_id=1)
    assert [m async for m in b.records()] == []
    assert task.offsets == {}


async def test_a_task_that_stopped_processes_nothing_more() -> None:
    task, b = batch(FakeManager(), [10, 11])
    got = []
    async for m in b.records():
        got.append(m.offset)
        task.state = TaskState.FENCED
    assert got == [10]


async def testdelivered_waits_for_unanswered_sends_and_raises_the_first_error() -> None:
    loop = asyncio.get_running_loop()
    task = Task(0, "txn-0")
    ok, late = loop.create_future(), loop.create_future()
    ok.set_result("meta")
    task.pending.extend([(ok, 0), (late, 9)])
    loop.call_later(0.01, late.set_result, "meta")
    await delivered(task)
    assert late.done()

    failed = loop.create_future()
    failed.set_exception(KafkaTimeoutError("batch expired"))
    task.changelog_pending.append((failed, 0))
    with pytest.raises(KafkaTimeoutError):
        await delivered(task)


def test_table_writes_go_to_the_partition_of_the_batch() -> None:
    with pytest.raises(RuntimeError, match="only readable and writable while processing"):
        current_partition()
    token = batch_partition.set(5)
    try:
        assert current_partition() == 5
    finally:
        batch_partition.reset(token)
