"""The exactly-once worker's batch path, in memory: which records of a batch count as processed
(``TaskBatch.spans``), the commit's check of the sends (``delivered``), and the partition a
table write goes to while a batch is processed. The consumer side and the whole path on a real
broker are covered by tests/integration and tests/faults (every exactly-once worker runs it)."""

from __future__ import annotations

import asyncio
import gc
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaTimeoutError
from aiokafka.structs import TopicPartition

from app.eos import (
    GAP_POLL,
    YIELD_EVERY,
    BrokerReader,
    Task,
    TaskBatch,
    TaskState,
    batch_partition,
)
from app.eos.guards import gap_checked
from tables.transactional import current_partition


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int


class FakeManager:
    """What ``TaskBatch.spans`` reads of the manager: the app's flow and generation, the
    broker's answer about gaps and the first-offset log."""

    def __init__(self, gaps: dict[int, bool] | None = None) -> None:
        self.flow = True
        self.app = SimpleNamespace(
            flow_control=SimpleNamespace(is_active=lambda: self.flow), consumer_generation_id=1
        )
        self.first_offsets: dict[TopicPartition, int] = {}
        #: offset -> the broker's answer about the gap before it (True: nothing missed)
        self.gaps = gaps or {}
        self.asked: list[int] = []

    async def gap_checked(self, task: Task, message: Msg) -> bool:
        await asyncio.sleep(0)
        self.asked.append(message.offset)
        return self.gaps[message.offset]


def batch(
    manager: FakeManager, offsets: list[int], generation_id: int = 1
) -> tuple[Task, TaskBatch]:
    task = Task(3, "txn-3")
    messages = [Msg("events", 3, o) for o in offsets]
    return task, TaskBatch(manager, task, messages, generation_id)  # type: ignore[arg-type]


TP = TopicPartition("events", 3)


async def processed(b: TaskBatch, offsets: list[int]) -> list[int]:
    """The offsets of the records ``b.spans()`` gives of a batch of ``offsets``, in order."""
    return [offsets[i] async for start, stop in b.spans() for i in range(start, stop)]


async def test_a_span_counts_once_the_loop_body_finished() -> None:
    task, b = batch(FakeManager(), [10, 11, 12])
    spans = []
    async for start, stop in b.spans():
        # while the body runs, the span's offsets are not in the transaction yet
        assert task.offsets.get(TP, 10) == 10 + start
        spans.append((start, stop))
    assert spans == [(0, 3)]
    assert task.offsets[TP] == task.positions[TP] == 13
    assert task.records == 3
    assert TP in task.delivered_at


async def test_a_span_holds_consecutive_offsets_and_at_most_yield_every_records() -> None:
    offsets = [*range(0, 300), *range(301, 305), 310]
    manager = FakeManager(gaps={301: True, 310: True})
    task, b = batch(manager, offsets)
    spans = [(start, stop) async for start, stop in b.spans()]
    assert spans == [(0, YIELD_EVERY), (YIELD_EVERY, 300), (300, 304), (304, 305)]
    assert manager.asked == [301, 310]
    assert task.records == 305
    assert task.offsets[TP] == 311


async def test_a_body_that_raises_leaves_its_span_out() -> None:
    offsets = [*range(0, YIELD_EVERY), *range(YIELD_EVERY, YIELD_EVERY + 3)]
    task, b = batch(FakeManager(), offsets)
    with pytest.raises(RuntimeError):
        async for start, _ in b.spans():
            if start == YIELD_EVERY:
                raise RuntimeError("the second span failed")
    assert task.offsets[TP] == YIELD_EVERY  # the first span processed, the second not
    assert task.records == YIELD_EVERY


async def test_records_delivered_again_are_skipped() -> None:
    offsets = [10, 11, 11, 12, 9]
    task, b = batch(FakeManager(), offsets)
    task.positions[TP] = 11  # 10 was processed in an earlier batch
    assert await processed(b, offsets) == [11, 12]
    assert task.records == 2
    assert task.offsets[TP] == task.positions[TP] == 13


async def test_offsets_out_of_order_end_a_span() -> None:
    """Offsets whose ends are as far apart as a run's (10 ... 13 over four records) but not
    consecutive on the way: each out-of-order one is skipped, never taken into a span."""
    offsets = [10, 12, 11, 13]
    task, b = batch(FakeManager(gaps={12: True}), offsets)
    assert await processed(b, offsets) == [10, 12, 13]
    assert task.offsets[TP] == 14


async def test_a_gap_is_asked_about_and_the_answer_decides() -> None:
    manager = FakeManager(gaps={12: True, 20: False})
    task, b = batch(manager, [10, 12, 20])
    assert await processed(b, [10, 12, 20]) == [10, 12]
    assert manager.asked == [12, 20]
    assert task.records == 2
    assert task.offsets[TP] == 13


async def test_a_stopped_flow_or_a_new_generation_ends_the_batch_after_the_span() -> None:
    manager = FakeManager()
    offsets = list(range(10, 10 + YIELD_EVERY + 2))
    task, b = batch(manager, offsets)
    got = []
    async for start, stop in b.spans():
        got.append((start, stop))
        manager.flow = False  # a rebalance began while the first span was processed
    assert got == [(0, YIELD_EVERY)]  # the span finished, nothing after it
    assert task.offsets[TP] == 10 + YIELD_EVERY

    manager = FakeManager()
    manager.app.consumer_generation_id = 2
    task, b = batch(manager, [10, 11], generation_id=1)
    assert await processed(b, [10, 11]) == []
    assert task.offsets == {}


async def test_a_new_generation_seen_after_a_gap_check_ends_the_batch() -> None:
    manager = FakeManager(gaps={12: True})
    task, b = batch(manager, [10, 12, 13])
    got = []
    async for start, stop in b.spans():
        got.append((start, stop))
        manager.app.consumer_generation_id = 2  # the group rebalanced meanwhile
    assert got == [(0, 1)]
    assert manager.asked == []  # not even asked: checked before the span after
    assert task.offsets[TP] == 11


async def test_a_task_that_stopped_processes_nothing_more() -> None:
    offsets = list(range(10, 10 + YIELD_EVERY + 1))
    task, b = batch(FakeManager(), offsets)
    got = []
    async for start, stop in b.spans():
        got.append((start, stop))
        task.state = TaskState.FENCED
    assert got == [(0, YIELD_EVERY)]


class BatchProducer:
    """The producer as the task's collector uses it (``create_batch``, ``send_batch``), at the
    client boundary: batches of ``batch_size`` bytes by ``make``, each handed over recorded."""

    def __init__(self, make: Any) -> None:
        self.make = make
        self.handed: list[Any] = []

    def create_batch(self) -> Any:
        return self.make()

    async def send_batch(self, builder: Any, topic: str, partition: int) -> asyncio.Future[Any]:
        self.handed.append(builder)
        return asyncio.get_running_loop().create_future()


@pytest.mark.parametrize("native", [True, False], ids=["native", "aiokafka"])
async def test_records_sent_together_fill_the_batches_a_send_each_fills(native: bool) -> None:
    """``TaskTransaction.send_records`` (a dedup span's first sightings) against ``send`` one
    record at a time: the same batches, cut at the same records, with the same bytes, on the
    native builder and on aiokafka's; a batch already open takes the first of them."""
    import dedupe_native

    from adapters.built_batches import batch_maker
    from app.eos import TaskTransaction

    make = batch_maker(dedupe_native if native else None, 1_000, 0)
    records = [
        (1_700_000_000_000 + n, f"k{n}".encode(), b"v" * (n % 90), (("h", b"x"),) if n % 3 else ())
        for n in range(120)
    ]
    built = []
    for together in (True, False):
        producer = BatchProducer(make)
        task = Task(3, "txn-3", producer=producer)  # type: ignore[arg-type]
        txn = TaskTransaction(task)
        await txn.send("out", key=b"a", value=b"0", headers=None, partition=3, timestamp_ms=5)
        if together:
            await txn.send_records("out", 3, records[:70])
            await txn.send_records("out", 3, [])
            await txn.send_records("out", 3, records[70:])
        else:
            for timestamp, key, value, headers in records:
                await txn.send(
                    "out",
                    key=key,
                    value=value,
                    headers=headers,
                    partition=3,
                    timestamp_ms=timestamp,
                )
        batches = [*producer.handed, *task.collector.open_batches().values()]
        assert len(batches) > 3  # the records filled several
        for batch in batches:
            batch._set_producer_state(1, 0, 0)
        built.append([bytes(batch._build()) for batch in batches])
    assert built[0] == built[1]


async def test_sends_join_the_open_batch_of_their_partition() -> None:
    """``TaskTransaction.send`` with aiokafka's own batch builder (a producer that never
    connects): headers as the fetched record has them (a tuple), none, and a second
    partition; the open batch is found by a plain (topic, partition) tuple."""
    from aiokafka import AIOKafkaProducer

    from app.eos import TaskTransaction

    producer = AIOKafkaProducer(bootstrap_servers="127.0.0.1:9")
    task = Task(3, "txn-3", producer=producer)
    txn = TaskTransaction(task)
    common = {"timestamp_ms": 1_700_000_000_000}
    await txn.send("out", key=b"a", value=b"1", headers=(("h", b"v"),), partition=3, **common)
    await txn.send("out", key=b"b", value=b"2", headers=(), partition=3, **common)
    await txn.send("out", key=b"c", value=b"3", headers=None, partition=3, **common)
    await txn.send("out", key=b"d", value=b"4", headers=[("h", b"w")], partition=5, **common)
    assert {tp: b.record_count() for tp, b in task.collector.open_batches().items()} == {
        TopicPartition("out", 3): 3,
        TopicPartition("out", 5): 1,
    }
    assert all(isinstance(tp, TopicPartition) for tp in task.collector.open_batches())
    with pytest.raises(ValueError, match="explicit partitions"):
        await txn.send("out", key=b"e", value=b"5", headers=None, partition=None, **common)


async def test_delivered_waits_for_unanswered_sends_and_raises_the_first_error() -> None:
    loop = asyncio.get_running_loop()
    task = Task(0, "txn-0")
    ok, late = loop.create_future(), loop.create_future()
    ok.set_result("meta")
    task.collector.pending.extend([(ok, 0), (late, 9)])
    loop.call_later(0.01, late.set_result, "meta")
    await task.collector.delivered()
    assert late.done()

    failed = loop.create_future()
    failed.set_exception(KafkaTimeoutError("batch expired"))
    task.collector.changelog_pending["changelog"] = [(failed, 0)]
    with pytest.raises(KafkaTimeoutError):
        await task.collector.delivered()


def test_table_writes_go_to_the_partition_of_the_batch() -> None:
    with pytest.raises(RuntimeError, match="only readable and writable while processing"):
        current_partition()
    token = batch_partition.set(5)
    try:
        assert current_partition() == 5
    finally:
        batch_partition.reset(token)


async def test_sends_of_a_transaction_given_up_fail_quietly() -> None:
    """A send that fails after its transaction was dropped (aborted, fenced) must not log
    "Future exception was never retrieved" at ERROR: nobody is left to await it."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        task = Task(0, "txn-0")
        kept, dropped = loop.create_future(), loop.create_future()
        task.collector.pending.append((dropped, 0))
        task.reset_transaction()
        for fut in (kept, dropped):
            fut.set_exception(KafkaTimeoutError("fenced later"))
        del fut, kept, dropped
        gc.collect()
        # only the future that was not in the dropped transaction is reported
        assert [c["message"] for c in reported] == ["Future exception was never retrieved"]
    finally:
        loop.set_exception_handler(None)


class FakeReader:
    """The gap reader as ``_first_record`` uses it: answers ``batches`` in turn (then
    nothing); a fetch moves its position to ``moves_to`` (control records skipped), else it
    stays where it was sought. ``asked``: the timeouts of its fetches."""

    def __init__(
        self, batches: list[dict[TopicPartition, list[Any]]], moves_to: int | None = None
    ) -> None:
        self.batches = batches
        self.moves_to = moves_to
        self.at = 0
        self.asked: list[int] = []

    def assignment(self) -> set[TopicPartition]:
        return {TP}

    def seek(self, tp: TopicPartition, offset: int) -> None:
        self.at = offset

    async def position(self, tp: TopicPartition) -> int:
        return self.at

    async def getmany(self, tp: TopicPartition, timeout_ms: int) -> dict[TopicPartition, Any]:
        self.asked.append(timeout_ms)
        if self.moves_to is not None:
            self.at = self.moves_to
        return self.batches.pop(0) if self.batches else {}


def gap_manager(reader_batches: list[dict[TopicPartition, list[Any]]]) -> Any:
    """What ``gap_checked`` uses: a broker whose range reader answers ``reader_batches`` in
    turn (then nothing) and never moves past offset 10, and a record of the failures."""
    failures: list[str] = []
    manager = SimpleNamespace(
        settings=SimpleNamespace(commit_timeout=0.01),
        failures=failures,
        reader=FakeReader(reader_batches),
        fail=lambda task, why: failures.append(why),
    )

    async def first_committed_record(tp: TopicPartition, start: int, end: int) -> int | None:
        return await BrokerReader._first_record(manager, manager.reader, tp, start, end)  # type: ignore[arg-type]

    manager.first_committed_record = first_committed_record
    return manager


async def test_a_gap_the_broker_does_not_answer_for_is_unknown_not_a_skip() -> None:
    manager = gap_manager([])  # a paused broker: nothing comes back
    with pytest.raises(TimeoutError, match=r"offsets \[10, 12\)"):
        await manager.first_committed_record(TP, 10, 12)

    task = Task(3, "txn-3")
    task.positions[TP] = 10
    ok = await gap_checked(manager, manager.fail, task, Msg("events", 3, 12))  # type: ignore[arg-type]
    assert not ok
    assert manager.failures == [
        "could not learn what lies between offsets 10 and 12 of events-3 (the broker did not "
        "answer: TimeoutError('no answer for events-3 offsets [10, 12) within 0.01s'))"
    ]


async def test_a_gap_with_a_committed_record_in_it_is_a_skip() -> None:
    manager = gap_manager([{TP: [SimpleNamespace(offset=11)]}])
    task = Task(3, "txn-3")
    task.positions[TP] = 10
    ok = await gap_checked(manager, manager.fail, task, Msg("events", 3, 12))  # type: ignore[arg-type]
    assert not ok
    assert manager.failures[0].startswith("the consumer skipped record 11 of events-3")


async def test_a_range_of_control_records_only_is_answered_by_the_position() -> None:
    """A commit marker (or aborted batches) moves the reader's position without a record, and
    aiokafka's ``getmany`` waits for records until its timeout: the check polls briefly and
    reads the position, instead of waiting the whole commit timeout (30 s by default) for an
    answer it had after the first fetch."""
    reader = FakeReader([], moves_to=12)  # the fetch held the marker at 11: skipped
    manager = SimpleNamespace(settings=SimpleNamespace(commit_timeout=30.0))
    found = await BrokerReader._first_record(manager, reader, TP, 11, 12)  # type: ignore[arg-type]
    assert found is None
    assert reader.asked == [round(GAP_POLL * 1000)]
