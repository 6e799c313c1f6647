"""A Kafka consumer loop with exactly-once effects (aiokafka): the clean topic's reader.

How to run (a consumer of the pipeline's clean topic, billing each event once)::

    from idempotent_consumer import PostgresStore
    from idempotent_consumer.kafka import IdempotentConsumer

    async def charge(record, claim):
        return await payments.charge(json.loads(record.value))  # -> the charge id, cached

    consumer = IdempotentConsumer(
        "events-clean", bootstrap_servers="127.0.0.1:9092", group_id="billing",
        store=PostgresStore("postgresql://..."), handler=charge)
    await consumer.run()          # until consumer.stop()

What it guarantees: the consumer reads with ``isolation_level="read_committed"`` (aborted
transactions of the dedupe worker never reach the handler), commits no offsets on its own,
and commits a partition's offset only past records whose claims completed. A crash after an
effect and before the commit, or a rebalance mid-batch, redelivers records; their claims are
completed, so ``handler`` is not called again (``on_repeat`` is, with the first result). A
handler that raises releases its claim; the offsets of the records before it are committed
and the error propagates (the record is redelivered when the consumer restarts).

The processor namespace defaults to the consumer group: each group dedups on its own.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from aiokafka import AIOKafkaConsumer, ConsumerRecord, OffsetAndMetadata, TopicPartition
from aiokafka.errors import CommitFailedError, IllegalStateError

from ._base import AsyncStore, Serializer
from ._core import Claim, Idempotency

log = logging.getLogger("idempotent_consumer.kafka")

Handler = Callable[[ConsumerRecord[Any, Any], Claim], Awaitable[Any]]
OnRepeat = Callable[[ConsumerRecord[Any, Any], Any], Awaitable[None] | None]


def key_as_id(record: ConsumerRecord[Any, Any]) -> str:
    """The default event id: the record's key (the pipeline keys records by messageId)."""
    if record.key is None:
        raise ValueError(
            f"record {record.topic}[{record.partition}]@{record.offset} has no key: the event "
            "id must come from the producer (pass event_id= to read it from the value)"
        )
    key = record.key
    return key.decode() if isinstance(key, bytes) else str(key)


def value_as_payload(record: ConsumerRecord[Any, Any]) -> object:
    return record.value


@dataclass
class ConsumerStats:
    processed: int = 0  # handler ran and its claim completed
    repeats: int = 0  # claim was done: handler not called
    commits: int = 0
    failed_commits: int = 0  # a rebalance took the partition first: its next owner resumes


class IdempotentConsumer:
    """Reads ``topics`` with read_committed and calls ``handler(record, claim)`` once per
    event id and processor; the handler's return value is the result a repeat gets back.

    ``join_transaction=True`` (PostgreSQL): each record's claim runs in a transaction on a
    pooled connection, ``claim.connection``; write the effect on it and the effect and the
    completed record commit together. Other keyword arguments go to ``AIOKafkaConsumer``.
    """

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str,
        group_id: str,
        store: AsyncStore,
        handler: Handler,
        processor: str | None = None,
        lease: timedelta = timedelta(seconds=30),
        expire_after: timedelta = timedelta(days=7),
        serializer: Serializer | None = None,
        event_id: Callable[[ConsumerRecord[Any, Any]], str] = key_as_id,
        payload: Callable[[ConsumerRecord[Any, Any]], object] = value_as_payload,
        on_repeat: OnRepeat | None = None,
        join_transaction: bool = False,
        max_records: int = 500,
        **consumer_options: Any,
    ) -> None:
        for forced in ("isolation_level", "enable_auto_commit", "group_id"):
            if forced in consumer_options:
                raise ValueError(f"{forced} is set by IdempotentConsumer")
        self.group_id = group_id
        self.idempotency = Idempotency(
            store,
            processor or group_id,
            lease=lease,
            expire_after=expire_after,
            serializer=serializer,
        )
        self.consumer = AIOKafkaConsumer(
            *topics,
            bootstrap_servers=bootstrap_servers,
            group_id=group_id,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset=consumer_options.pop("auto_offset_reset", "earliest"),
            **consumer_options,
        )
        self.handler = handler
        self.event_id = event_id
        self.payload = payload
        self.on_repeat = on_repeat
        self.join_transaction = join_transaction
        self.max_records = max_records
        self.stats = ConsumerStats()
        self._stopping = asyncio.Event()

    def stop(self) -> None:
        """Ask ``run`` to return after the record in hand (its offsets committed)."""
        self._stopping.set()

    async def run(self, timeout_ms: int = 500) -> ConsumerStats:
        """Consume until ``stop()``; returns the counters."""
        await self.consumer.start()
        try:
            while not self._stopping.is_set():
                batch = await self.consumer.getmany(
                    timeout_ms=timeout_ms, max_records=self.max_records
                )
                for tp, records in batch.items():
                    await self._partition(tp, records)
                    if self._stopping.is_set():
                        break
        finally:
            await self.consumer.stop()
        return self.stats

    async def _partition(self, tp: TopicPartition, records: list[ConsumerRecord[Any, Any]]) -> None:
        done_up_to: int | None = None
        try:
            for record in records:
                if tp not in self.consumer.assignment() or self._stopping.is_set():
                    break  # revoked mid-batch (its next owner resumes) or stopping
                await self.process(record)
                done_up_to = record.offset + 1
        finally:
            if done_up_to is not None:
                await self._commit(tp, done_up_to)

    async def process(self, record: ConsumerRecord[Any, Any]) -> Any:
        """One record through its claim; returns the result (the first run's, on a repeat)."""
        idem = self.idempotency
        event_id = self.event_id(record)
        if self.join_transaction:
            connection = getattr(idem.store, "connection", None)
            if connection is None:
                raise TypeError("join_transaction needs a store with connections (PostgresStore)")
            async with connection() as conn:
                return await self._claimed(record, event_id, conn)
        return await self._claimed(record, event_id, None)

    async def _claimed(self, record: ConsumerRecord[Any, Any], event_id: str, conn: Any) -> Any:
        payload = self.payload(record)
        async with self.idempotency.claim(
            event_id, payload=payload, wait=True, connection=conn
        ) as claim:
            if claim.done:
                self.stats.repeats += 1
                if self.on_repeat is not None:
                    maybe = self.on_repeat(record, claim.result)
                    if maybe is not None:
                        await maybe
                return claim.result
            result = await self.handler(record, claim)
            claim.complete(result)
        self.stats.processed += 1
        return result

    async def _commit(self, tp: TopicPartition, offset: int) -> None:
        try:
            await self.consumer.commit({tp: OffsetAndMetadata(offset, "")})
            self.stats.commits += 1
        except (CommitFailedError, IllegalStateError) as exc:
            # The partition went to another member; the records done here are completed
            # claims, so the next owner's redelivery of them is a repeat.
            self.stats.failed_commits += 1
            log.warning("commit of %s at %d failed (%s); the next owner resumes", tp, offset, exc)
