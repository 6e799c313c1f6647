"""At-least-once processing (``DEDUPE_PROCESSING_GUARANTEE=at_least_once``), for comparisons.

The default worker runs every record in a Kafka transaction (``app/eos/``). This mode runs the
same agent, table and rules with Faust's own ``at_least_once`` guarantee instead:

- one plain idempotent producer (``acks=all``, no transactions) for output, dead-letter,
  repartition and changelog records; output is visible to readers as soon as it is written;
- Faust's consumer commits the offsets of processed records every ``DEDUPE_COMMIT_INTERVAL``;
  before each commit every send of the records processed so far is awaited (a failed send
  stops the worker instead of committing past it);
- the table's writes are staged per partition exactly as in exactly-once mode and applied to
  RocksDB at that same point, once the sends of their records are acknowledged. So local state
  never holds an id whose forwarded copy might not exist, and after a crash the records since
  the last commit are processed again: their first copies may be forwarded a second time
  (at-least-once), none is lost.

Records go through Faust's per-record path to the ``dedupe_events`` agent, which opens
``processing(message)`` per record (the exactly-once worker hands batches to ``dedupe_batch``
instead: Faust's offset commit, which this mode relies on, only counts records its stream
acknowledged). It reuses the exactly-once manager's ``register_store``, its changelog pull
and ``tasks`` so tables and the web views work unchanged. Not covered by the fault tests: the
guarantees the README states are those of the default exactly-once mode.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from types import TracebackType
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition
from faust.transport.drivers.aiokafka import Consumer as FaustKafkaConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from faust.types import TP, Message

from app.eos import (
    MAX_BATCH_BYTES,
    ConsumerThread,
    Task,
    TaskTransaction,
    TaskTransactionManager,
    send_lingering,
)

log = logging.getLogger(__name__)


class _Scope:
    """``async with tm.processing(message) as txn``: one record, sends through the plain producer.

    Changelog records the record's table writes staged are sent when the scope closes; the
    writes themselves stay staged until the next offset commit (:meth:`AtLeastOnceManager.flush`).
    """

    __slots__ = ("_manager", "_message", "_task")

    def __init__(self, manager: AtLeastOnceManager, message: Message) -> None:
        self._manager = manager
        self._message = message
        self._task: Task | None = None

    async def __aenter__(self) -> TaskTransaction:
        task = await self._manager.task(self._message.partition)
        await task.lock.acquire()
        self._task = task
        return TaskTransaction(task)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task = self._task
        assert task is not None
        try:
            if exc is None:
                msg = self._message
                tp = TopicPartition(msg.topic, msg.partition)
                task.offsets[tp] = task.positions[tp] = msg.offset + 1
                task.records += 1
        finally:
            task.lock.release()
        return False


class AtLeastOnceManager(TaskTransactionManager):
    """The transaction manager's interface without transactions (see the module docstring).

    Faust does not start a transaction manager outside ``exactly_once``, so nothing here runs
    in the background: tasks are created when their partition's first record arrives, and
    :class:`AtLeastOnceConsumer` calls :meth:`flush` before each offset commit.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._producer: AIOKafkaProducer | None = None
        self._producer_lock = asyncio.Lock()

    def processing(self, message: Message) -> _Scope:
        """Scope for processing ``message``: ``async with tm.processing(msg) as txn: ...``."""
        return _Scope(self, message)

    async def task(self, partition: int) -> Task:
        """The task of ``partition`` (created on first use), sharing the one plain producer."""
        task = self.tasks.get(partition)
        if task is None:
            producer = await self.plain_producer()
            task = self.tasks.setdefault(partition, Task(partition, "", producer))
        return task

    async def plain_producer(self) -> AIOKafkaProducer:
        async with self._producer_lock:
            if self._producer is None:
                s = self.settings
                producer = AIOKafkaProducer(
                    bootstrap_servers=s.bootstrap_servers,
                    **s.kafka_client_kwargs(),
                    client_id=f"{s.app_id}-at-least-once-producer",
                    enable_idempotence=True,
                    acks="all",
                    # as in app.eos: tasks build the batches (RecordCollector), sent at flush
                    linger_ms=0,
                    max_batch_size=MAX_BATCH_BYTES,
                    max_request_size=s.dlq_max_message_bytes,
                    request_timeout_ms=int(min(s.commit_timeout, 30) * 1000),
                )
                await producer.start()
                self._producer = producer
                log.info("at-least-once: plain producer started (no transactions)")
            return self._producer

    async def flush(self) -> None:
        """Await every send made so far, then apply the staged table writes of their records.

        Raises the first failed send: the caller must not commit offsets then.
        """
        await asyncio.gather(*(self._flush_task(t) for t in list(self.tasks.values())))

    async def _flush_task(self, task: Task) -> None:
        async with task.lock:  # no record of this partition is half-processed meanwhile
            if not task.records:
                return
            try:
                assert task.producer is not None
                await self.committer.pull_changelogs(task)
                await task.collector.send_all(task.producer)
                await send_lingering(task.producer)
                await task.collector.delivered()
            except BaseException:
                self._discard_staged(task)
                task.reset_transaction()
                raise
            for store, _ in self.stores:
                store.commit_partition(task.partition, None)
            task.commits += 1
            task.committed_records += task.records
            task.reset_transaction()

    async def drop_partitions(self, partitions: set[int]) -> None:
        """Forget the tasks of revoked partitions (after their offsets were committed)."""
        for p in partitions:
            task = self.tasks.pop(p, None)
            if task is not None:
                self._discard_staged(task)
                task.reset_transaction()

    async def close(self) -> None:
        if self._producer is not None:
            await self.producers.close(self._producer)
            self._producer = None


class AtLeastOnceConsumer(FaustKafkaConsumer):  # type: ignore[misc]
    """Faust's consumer; before committing offsets, the sends behind them must be acknowledged."""

    def _new_consumer_thread(self) -> ConsumerThread:
        # The same consumer thread as exactly-once: DEDUPE_FETCH_MAX_WAIT applies to both modes.
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _commit_offsets(
        self, offsets: Mapping[TP, int], start_new_transaction: bool = True
    ) -> bool:
        tm: AtLeastOnceManager = self.transactions
        try:
            await tm.flush()
        except Exception as exc:
            log.critical("at-least-once: a send failed (%r); not committing, stopping", exc)
            await self.crash(exc)
            return False
        committed: bool = await super()._commit_offsets(offsets, start_new_transaction)
        return committed

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        await super().on_partitions_revoked(revoked)
        tm: AtLeastOnceManager = self.transactions
        await tm.drop_partitions({tp.partition for tp in revoked})

    async def on_stop(self) -> None:
        await super().on_stop()  # commits what was processed (through _commit_offsets)
        tm: AtLeastOnceManager = self.transactions
        await tm.close()


class AtLeastOnceTransport(AIOKafkaTransport):  # type: ignore[misc]
    """Faust's aiokafka transport with the at-least-once consumer and manager."""

    Consumer = AtLeastOnceConsumer
    TransactionManager = AtLeastOnceManager
