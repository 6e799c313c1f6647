"""The processing scope of one fetched batch: a task's records in its open transaction, under
the task's lock, with the sequence guard (a record counts as processed only in offset order).
Table writes made meanwhile stay staged in their stores; the commit sends them.

The consumer hands each partition's fetched records to the app's batch handler, which opens
``async with manager.processing_batch(records, generation) as batch`` and iterates
``batch.spans()``; what it sends goes through ``batch.send`` into the task's transaction.
The scope needs a few things of the manager (:class:`BatchOwner`), never the manager itself.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Any, Protocol, TypeAlias

from aiokafka.structs import ConsumerRecord, TopicPartition

from adapters.built_batches import Record, append_records
from app.eos.producer import is_transaction_error
from app.eos.task import Task, TaskState
from tables.protocol import processing_partition

log = logging.getLogger(__name__)

#: The partition whose records the current batch scope processes (tables read it: see
#: ``tables.transactional.current_partition``).
batch_partition = processing_partition

#: A batch gives the event loop a turn after this many records, and a span of it
#: (``TaskBatch.spans``) holds at most this many: what a rebalance or a stop may wait for.
YIELD_EVERY = 256

#: A fetched record of a source topic, as the batch path reads it: aiokafka's own record
#: (``timestamp`` in ms, -1 when it has none; ``headers`` a tuple), handed over as fetched,
#: without Faust's ``Message`` (about twenty attributes copied per record).
SourceRecord: TypeAlias = "ConsumerRecord[bytes, bytes]"

#: What the consumer hands records of the source topics to: one partition's records, in offset
#: order, as fetched, and the consumer generation they were fetched in (``app.eos.consumer``).
BatchHandler = Callable[[list[SourceRecord], int], Awaitable[None]]


class BatchOwner(Protocol):
    """What a batch's scope needs of the transaction manager."""

    app: Any
    tasks: dict[int, Task]
    #: First offset processed per source partition since the last rebalance (for the log).
    first_offsets: dict[TopicPartition, int]
    #: Commit a task early once its open transaction holds this many records.
    commit_every: int

    async def gap_checked(self, task: Task, message: SourceRecord) -> bool: ...

    def transaction_error(self, task: Task, exc: BaseException, where: str) -> bool: ...

    def commit_soon(self) -> None: ...


class TaskTransaction:
    """What the dedup loop may do while processing a task's records: send, inside the task's
    transaction (the scope of a batch is :class:`TaskBatch`)."""

    __slots__ = ("_builder_of", "_collector", "_task")

    def __init__(self, task: Task) -> None:
        self._task = task
        self._collector = task.collector
        self._builder_of = task.collector.builder_of

    @property
    def partition(self) -> int:
        return self._task.partition

    async def send(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> None:
        """Send one record in this task's open transaction; it becomes visible only on commit.

        It runs for every forwarded record: the open batch is found by a plain ``(topic,
        partition)`` tuple (equal to, and hashed as, the ``TopicPartition`` it is kept under),
        so a ``TopicPartition`` is built only when a batch is opened."""
        if partition is None:
            raise ValueError("a task transaction sends to explicit partitions only")
        if self.send_now(topic, partition, key, value, headers, timestamp_ms):
            return
        listed = list(headers) if headers else None  # aiokafka's builder takes a list only
        tp = TopicPartition(topic, partition)
        producer = self._task.producer
        assert producer is not None
        collector = self._collector
        if not collector.append_now(producer, tp, key, value, timestamp_ms, listed):
            await collector.append(producer, tp, key, value, timestamp_ms, listed)

    async def send_records(self, topic: str, partition: int, records: list[Record]) -> None:
        """Send ``records``, ``(timestamp_ms, key, value, headers)`` tuples, in order, to
        ``(topic, partition)`` in this task's open transaction, as :meth:`send` sends each: one
        call per output batch (``built_batches.append_records``), awaiting only to open a
        batch. The first sightings of a dedup span."""
        builder = self._builder_of((topic, partition))
        start = 0 if builder is None else append_records(builder, records)
        if start < len(records):
            producer = self._task.producer
            assert producer is not None
            tp = TopicPartition(topic, partition)
            await self._collector.extend(producer, tp, records, append_records, start)

    def send_now(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
    ) -> bool:
        """Append a record to the open output batch of ``(topic, partition)`` when that batch
        has room, without awaiting; False when it has none (no batch open yet, or full): the
        caller then awaits :meth:`send`, which opens one. :meth:`send` tries this first; the
        dedup loop's first sightings call it directly, one plain call each."""
        builder = self._builder_of((topic, partition))
        return (
            builder is not None
            and builder.append(
                timestamp=timestamp_ms,
                key=key,
                value=value,
                headers=list(headers) if headers else None,  # aiokafka's builder: a list
            )
            is not None
        )


class TaskBatch(TaskTransaction):
    """What the agent may do while processing a batch of one task's records."""

    __slots__ = ("_generation_id", "_messages", "_owner")

    def __init__(
        self, owner: BatchOwner, task: Task, messages: list[SourceRecord], generation_id: int
    ) -> None:
        super().__init__(task)
        self._owner = owner
        self._messages = messages
        self._generation_id = generation_id

    async def spans(self) -> AsyncIterator[tuple[int, int]]:
        """The batch's records to process, as spans ``(start, stop)`` of its record list: each
        span's records are consecutive offsets, processed in order by the loop body that got
        the span; they count as processed (their offsets join the transaction) once that body
        finished.

        Skipped, as Faust's stream skips them: records of an older consumer generation or while
        the flow is stopped (a rebalance began); and records out of sequence (a record
        delivered again, or one after a gap that holds records: ``BatchOwner.gap_checked``).
        The rest of the batch is dropped when the task stops (fenced, failed): its records are
        re-read from the committed offset. Nothing skipped is committed.

        The checks run before each span, not before each record: a span holds at most
        :data:`YIELD_EVERY` records, so a rebalance or a stop waits for at most that many. A
        span finished after the task stopped is harmless (its transaction never commits), and
        one finished after the flow stopped commits whole, its offsets with its sends, as a
        record finished then always did. A body that raises leaves its span out; the scope
        then fails the task, so none of the span's sends commit either.

        Spans, not records, so that the dedup loop runs without an async-generator step, three
        checks and an offset store per record.
        """
        owner, task = self._owner, self._task
        app = owner.app
        flow_active = app.flow_control.is_active
        generation_id = self._generation_id
        messages = self._messages
        first = messages[0]
        tp = TopicPartition(first.topic, first.partition)
        positions, offsets = task.positions, task.offsets
        total = len(messages)
        i, turn_at = 0, YIELD_EVERY
        while i < total:
            if i >= turn_at:
                await asyncio.sleep(0)  # let the web server and timers run in a long batch
                turn_at = i + YIELD_EVERY
            if (
                task.state is not TaskState.RUNNING
                or not flow_active()
                or app.consumer_generation_id != generation_id
            ):
                return
            message = messages[i]
            offset = message.offset
            if i == 0:  # delivered: what the stall watchdog watches
                task.delivered_at[tp] = time.monotonic()
                task.stall_seeks.discard(tp)
            expected = positions.get(tp)
            if expected is not None and offset != expected:
                if offset < expected:
                    i += 1
                    continue  # delivered again: already processed in this or a committed txn
                if not await owner.gap_checked(task, message):
                    i += 1
                    continue
                # The check awaited: the task, flow and generation are checked again.
                if (
                    task.state is not TaskState.RUNNING
                    or not flow_active()
                    or app.consumer_generation_id != generation_id
                ):
                    return
            stop = _consecutive_end(messages, i, min(total, i + YIELD_EVERY))
            yield i, stop
            last = messages[stop - 1].offset
            offsets[tp] = positions[tp] = last + 1
            task.records += stop - i
            if tp not in owner.first_offsets:
                owner.first_offsets[tp] = offset
                log.info("%s-%d: first record processed at offset %d", *tp, offset)
            i = stop


def _consecutive_end(messages: Sequence[SourceRecord], start: int, limit: int) -> int:
    """The end of the run of consecutive offsets from ``messages[start]``, at most ``limit``.
    Walked record by record: a batch handed over again after a seek may hold an offset twice
    or out of order, and the walk trusts no order it did not see."""
    expected = messages[start].offset + 1
    for j in range(start + 1, limit):
        if messages[j].offset != expected:
            return j
        expected += 1
    return limit


class BatchScope:
    """``async with manager.processing_batch(messages) as batch``: a batch of one task's records
    in its transaction, with one lock hold and one transaction check.

    Yields ``None`` when this worker does not own the task (revoked, fenced or failed).
    """

    __slots__ = ("_generation_id", "_messages", "_owner", "_task", "_token")

    def __init__(self, owner: BatchOwner, messages: list[SourceRecord], generation_id: int) -> None:
        self._owner = owner
        self._messages = messages
        self._generation_id = generation_id
        self._task: Task | None = None
        self._token: Any = None

    async def __aenter__(self) -> TaskBatch | None:
        task = self._owner.tasks.get(self._messages[0].partition)
        if task is None or task.state is not TaskState.RUNNING:
            return None
        await task.lock.acquire()
        if task.state is not TaskState.RUNNING or task.producer is None:
            task.lock.release()
            return None
        try:
            if not task.in_transaction:
                await task.producer.begin_transaction()
                task.in_transaction = True
        except Exception as exc:
            # The producer's state, never the batch's (aiokafka asserts when it is fenced).
            task.lock.release()
            self._owner.transaction_error(task, exc, "beginning a transaction")
            return None
        except BaseException:
            task.lock.release()
            raise
        self._task = task
        self._token = batch_partition.set(task.partition)
        return TaskBatch(self._owner, task, self._messages, self._generation_id)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task = self._task
        if task is None:
            return False
        owner = self._owner
        batch_partition.reset(self._token)
        task.lock.release()
        if exc is not None:
            # Part of the batch is in the transaction: it must never commit. A transaction's
            # error stops the task (the partition is re-read), the worker goes on; anything
            # else is a bug and stops the worker.
            owner.transaction_error(task, exc, "while processing")
            return is_transaction_error(task.producer, exc)
        task.batches += 1
        if task.records >= owner.commit_every:
            owner.commit_soon()
        return False
