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
completed, so ``handler`` is not called again (``on_repeat`` is, with a :class:`Repeat`
holding the first result and the record).

A record that fails (the handler raises, or its id was seen with another payload) goes
through the consumer's :class:`ErrorPolicy`, after Spring Kafka's ``DefaultErrorHandler``
and Kafka Streams' ``ProcessingExceptionHandler``: each failure releases the record's claim;
it is tried again ``retries`` times with a growing pause (not for errors that cannot pass on
a second try, such as ``PayloadMismatch``), then handed to the ``recoverer`` (a
:class:`DeadLetterPublisher`, or any callback), and its offset is committed once the
recoverer returned. With no recoverer (the default) the error propagates as in 1.0: the
offsets of the records before it are committed, ``run`` raises, and the record is
redelivered when the consumer restarts.

The processor namespace defaults to the consumer group: each group dedups on its own.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from aiokafka import (
    AIOKafkaConsumer,
    AIOKafkaProducer,
    ConsumerRecord,
    OffsetAndMetadata,
    TopicPartition,
)
from aiokafka.errors import CommitFailedError, IllegalStateError

from ._base import AsyncStore, InvalidEventId, PayloadMismatch, Serializer
from ._core import Claim, Idempotency
from ._shared import Repeat, repeat_hook

log = logging.getLogger("idempotent_consumer.kafka")

Handler = Callable[[ConsumerRecord[Any, Any], Claim], Awaitable[Any]]
#: ``on_repeat(repeat: Repeat) -> answer``, as the decorators take it (1.0's
#: ``on_repeat(record, result)``: deprecated)
OnRepeat = Callable[[Repeat], Any] | Callable[[ConsumerRecord[Any, Any], Any], Any]
#: What a record that keeps failing is handed to: ``recoverer(record, error)``, awaited if it
#: returns an awaitable. Its offset is committed once it returns; if it raises, ``run`` raises.
Recoverer = Callable[[ConsumerRecord[Any, Any], Exception], Awaitable[None] | None]


@dataclass(frozen=True)
class ErrorPolicy:
    """What ``IdempotentConsumer`` does with a record that fails, after Spring Kafka's
    ``DefaultErrorHandler`` (a back-off, then a recoverer) and Kafka Streams'
    ``ProcessingExceptionHandler`` (continue or fail).

    ``retries``: how many more times a failed record is tried (its claim is released after
    each failure, so each try runs the handler afresh), pausing ``backoff``, doubled after
    each try up to ``max_backoff``. The pauses happen between two polls of the consumer: keep
    their sum well under ``max_poll_interval_ms`` (300 s by default), or the group takes the
    partitions away. ``not_retryable``: errors handed to the recoverer at once (a reused id
    with another payload, a record with no usable id: a second try cannot pass).
    ``recoverer``: what a record that still fails is handed to (a :class:`DeadLetterPublisher`,
    or a callback: one that only logs skips the record, as Kafka Streams'
    ``LogAndContinueProcessingExceptionHandler`` does); its offset is committed after the
    recoverer returned. None (the default): the error propagates and ``run`` raises, as in 1.0
    (Kafka Streams' ``LogAndFail``), after the retries.
    """

    retries: int = 2
    backoff: timedelta = timedelta(milliseconds=200)
    max_backoff: timedelta = timedelta(seconds=5)
    recoverer: Recoverer | None = None
    not_retryable: tuple[type[Exception], ...] = field(default=(PayloadMismatch, InvalidEventId))

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, not {self.retries}")

    def pause(self, failures: int) -> float:
        """Seconds to wait before the try after the ``failures``-th failure."""
        pause = self.backoff.total_seconds() * 2 ** (failures - 1)
        return float(min(pause, self.max_backoff.total_seconds()))

    def retryable(self, error: Exception, failures: int) -> bool:
        return failures <= self.retries and not isinstance(error, self.not_retryable)


#: Header names of a dead-letter record: Spring Kafka's (``KafkaHeaders.DLT_*``), so its tools
#: read them. Partition (4 bytes), offset and timestamp (8 bytes) are big-endian integers, as
#: Spring writes them; the others UTF-8 text.
DLT_ORIGINAL_TOPIC = "kafka_dlt-original-topic"
DLT_ORIGINAL_PARTITION = "kafka_dlt-original-partition"
DLT_ORIGINAL_OFFSET = "kafka_dlt-original-offset"
DLT_ORIGINAL_TIMESTAMP = "kafka_dlt-original-timestamp"
DLT_ORIGINAL_CONSUMER_GROUP = "kafka_dlt-original-consumer-group"
DLT_EXCEPTION_FQCN = "kafka_dlt-exception-fqcn"
DLT_EXCEPTION_MESSAGE = "kafka_dlt-exception-message"
DLT_EXCEPTION_STACKTRACE = "kafka_dlt-exception-stacktrace"


def dead_letter_headers(
    record: ConsumerRecord[Any, Any], error: BaseException, group_id: str | None = None
) -> list[tuple[str, bytes]]:
    """The record's own headers, then the ``kafka_dlt-*`` headers naming where it came from
    and the error that sent it to the dead-letter topic."""
    kind = type(error)
    headers = list(record.headers or ())
    headers += [
        (DLT_ORIGINAL_TOPIC, record.topic.encode()),
        (DLT_ORIGINAL_PARTITION, record.partition.to_bytes(4, "big", signed=True)),
        (DLT_ORIGINAL_OFFSET, record.offset.to_bytes(8, "big", signed=True)),
        (DLT_ORIGINAL_TIMESTAMP, int(record.timestamp).to_bytes(8, "big", signed=True)),
    ]
    if group_id is not None:
        headers.append((DLT_ORIGINAL_CONSUMER_GROUP, group_id.encode()))
    headers += [
        (DLT_EXCEPTION_FQCN, f"{kind.__module__}.{kind.__qualname__}".encode()),
        (DLT_EXCEPTION_MESSAGE, str(error).encode()),
        (DLT_EXCEPTION_STACKTRACE, "".join(traceback.format_exception(error)).encode()),
    ]
    return headers


class DeadLetterPublisher:
    """A recoverer that publishes the failed record to a dead-letter topic (Spring Kafka's
    ``DeadLetterPublishingRecoverer``): the same key, value and headers, plus the
    ``kafka_dlt-*`` headers (:func:`dead_letter_headers`), with the original timestamp.

    ``producer``: a started ``AIOKafkaProducer`` with no serializers (the consumer's raw
    key and value are sent as they are read), which the caller stops. ``topic``: the
    dead-letter topic, or a function of the record (default: ``<topic>.DLT``, Spring's
    default). ``same_partition``: send to the failed record's partition number (Spring's
    default; the dead-letter topic needs as many partitions); False lets the producer choose
    by key. The send is awaited until the broker acknowledged it, so the consumer commits the
    failed record's offset only once the dead letter is stored. A crash between the two sends
    the dead letter again on restart: dead letters are at least once. ``group_id``: written
    as ``kafka_dlt-original-consumer-group`` when given.
    """

    def __init__(
        self,
        producer: AIOKafkaProducer,
        topic: str | Callable[[ConsumerRecord[Any, Any]], str] | None = None,
        *,
        same_partition: bool = False,
        group_id: str | None = None,
    ) -> None:
        self.producer = producer
        self.topic = topic
        self.same_partition = same_partition
        self.group_id = group_id
        self.published = 0

    def topic_of(self, record: ConsumerRecord[Any, Any]) -> str:
        if self.topic is None:
            return f"{record.topic}.DLT"
        return self.topic if isinstance(self.topic, str) else self.topic(record)

    async def __call__(self, record: ConsumerRecord[Any, Any], error: Exception) -> None:
        await self.producer.send_and_wait(
            self.topic_of(record),
            value=record.value,
            key=record.key,
            partition=record.partition if self.same_partition else None,
            timestamp_ms=record.timestamp if record.timestamp >= 0 else None,
            headers=dead_letter_headers(record, error, self.group_id),
        )
        self.published += 1


def _legacy_hook(hook: Callable[..., Any], repeat: Repeat) -> Any:
    """1.0's ``on_repeat(record, result)``: its return value was not used."""
    answer = hook(repeat.record, repeat.result)
    if inspect.isawaitable(answer):

        async def keep_result() -> Any:
            await answer
            return repeat.result

        return keep_result()
    return repeat.result


def key_as_id(record: ConsumerRecord[Any, Any]) -> str:
    """The default event id: the record's key (the pipeline keys records by messageId)."""
    if record.key is None:
        raise InvalidEventId(
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
    retries: int = 0  # tries of a failed record after its first
    recovered: int = 0  # records handed to the error policy's recoverer (offsets committed)


class IdempotentConsumer:
    """Reads ``topics`` with read_committed and calls ``handler(record, claim)`` once per
    event id and processor; the handler's return value is the result a repeat gets back.

    ``join_transaction=True`` (PostgreSQL): each record's claim runs in a transaction on a
    pooled connection, ``claim.connection``; write the effect on it and the effect and the
    completed record commit together. ``errors``: what to do with a record that fails
    (:class:`ErrorPolicy`; default: two more tries, then ``run`` raises). Other keyword
    arguments go to ``AIOKafkaConsumer``.
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
        errors: ErrorPolicy | None = None,
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
        self.on_repeat = repeat_hook(on_repeat, _legacy_hook, "(record, result)")
        self.join_transaction = join_transaction
        self.max_records = max_records
        self.errors = errors or ErrorPolicy()
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
                if not await self._handled(tp, record):
                    break  # revoked or stopping between two tries: not done
                done_up_to = record.offset + 1
        finally:
            if done_up_to is not None:
                await self._commit(tp, done_up_to)

    async def _handled(self, tp: TopicPartition, record: ConsumerRecord[Any, Any]) -> bool:
        """One record through the error policy: True once it is processed or recovered (its
        offset may be committed), False if the partition was revoked or the consumer is
        stopping before it was; raises what the policy does not recover."""
        policy = self.errors
        failures = 0
        while True:
            try:
                await self.process(record)
                return True
            except Exception as error:
                failures += 1
                if policy.retryable(error, failures):
                    log.warning(
                        "%s[%d]@%d failed (%r), try %d of %d",
                        record.topic,
                        record.partition,
                        record.offset,
                        error,
                        failures + 1,
                        policy.retries + 1,
                    )
                    await self._pause(policy.pause(failures))
                    if tp not in self.consumer.assignment() or self._stopping.is_set():
                        return False
                    self.stats.retries += 1
                    continue
                if policy.recoverer is None:
                    raise
                log.error(
                    "%s[%d]@%d failed %d time(s) (%r): recovered",
                    record.topic,
                    record.partition,
                    record.offset,
                    failures,
                    error,
                )
                maybe = policy.recoverer(record, error)
                if inspect.isawaitable(maybe):
                    await maybe
                self.stats.recovered += 1
                return True

    async def _pause(self, seconds: float) -> None:
        """Sleep between two tries, cut short by ``stop()``."""
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({stopping}, timeout=seconds)
        finally:
            stopping.cancel()

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
                if self.on_repeat is None:
                    return claim.result
                answer = self.on_repeat(Repeat.of(claim, record))
                if inspect.isawaitable(answer):
                    answer = await answer
                return answer
            result = await self.handler(record, claim)
            if not claim.failed:  # the handler stored an error result: keep it
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
