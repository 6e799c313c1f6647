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
redelivered when the consumer restarts. A recoverer that raises does the same.

Two outcomes are not failures. ``AlreadyInProgress`` (another consumer holds the id right
now) is waited out and tried again, never counted against ``retries`` nor recovered: the
holder may be completing it. A result the serializer refuses (``NotSerializable`` from
``claim.complete``) comes after the effect: the claim completes with no result, a warning
names the refused type, and the offset is committed.

The processor namespace defaults to the consumer group: each group dedups on its own.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import inspect
import logging
import time
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

from ._base import (
    AlreadyInProgress,
    AsyncStore,
    InvalidEventId,
    NotSerializable,
    PayloadMismatch,
    Serializer,
)
from ._core import Claim, ClaimContext, Idempotency
from ._shared import Repeat, answer_repeat, repeat_hook

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
    """What ``IdempotentConsumer`` (and ``idempotent_agent``) does with a record that fails,
    after Spring Kafka's ``DefaultErrorHandler`` (a back-off, then a recoverer) and Kafka
    Streams' ``ProcessingExceptionHandler`` (continue or fail).

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

    ``AlreadyInProgress`` is not a failure: another consumer holds the id right now (a
    joined claim waited a lease for the other transaction's claim) and may be completing
    it; recovering the record would dead-letter an event that is being done. It is tried
    again after the back-off, never later than the holder's lease ends (``retry_after``),
    and those tries are not counted against ``retries``: they go on until the holder
    completes (the next try is a repeat), releases (it runs) or its lease ends (a takeover).
    Spring Kafka's retry topics treat a record that is not due yet the same way (the
    recoverer rethrows ``KafkaBackoffException``: no commit, the record is sought again), as
    Kafka Streams retries a retriable error from the last commit. ``in_progress_wait``
    bounds one wait between two polls: past it, ``IdempotentConsumer`` seeks the partition
    back to the record and polls again (the record comes back in the next batch). So a
    holder that keeps its transaction open never keeps the consumer from polling for longer
    than ``in_progress_wait`` plus one claim's wait (a joined claim waits up to the lease):
    keep that sum well under ``max_poll_interval_ms``.
    """

    retries: int = 2
    backoff: timedelta = timedelta(milliseconds=200)
    max_backoff: timedelta = timedelta(seconds=5)
    recoverer: Recoverer | None = None
    not_retryable: tuple[type[Exception], ...] = field(default=(PayloadMismatch, InvalidEventId))
    in_progress_wait: timedelta = timedelta(seconds=60)

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError(f"retries must be 0 or more, not {self.retries}")
        if self.in_progress_wait < timedelta(0):
            raise ValueError(f"in_progress_wait must be 0 or more, not {self.in_progress_wait}")

    def pause(self, failures: int) -> float:
        """Seconds to wait before the try after the ``failures``-th failure."""
        pause = self.backoff.total_seconds() * 2 ** (failures - 1)
        return float(min(pause, self.max_backoff.total_seconds()))

    def holder_pause(self, busy: AlreadyInProgress, tries: int) -> float:
        """Seconds to wait before the try after the ``tries``-th ``AlreadyInProgress`` of a
        record: the back-off, and no longer than until the holder's lease ends (after which
        the claim takes it over)."""
        pause = self.pause(tries)
        if busy.retry_after is not None and busy.retry_after > 0:
            pause = min(pause, busy.retry_after)
        return pause

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
    in_progress: int = 0  # tries that found the id held by another consumer (waited out)
    unstored: int = 0  # results the serializer refused (claims completed with no result)


class _Handled(enum.Enum):
    """How one record left the error policy (:func:`_handle_record`)."""

    DONE = "done"  # processed, a repeat, or recovered: its offset may be committed
    LEFT = "left"  # the partition was revoked or the consumer is stopping: not done
    HELD = "held"  # another consumer still holds its id after ``in_progress_wait``: not done


def _left_open(claim: Claim) -> bool:
    """Did the handler leave its claim to be completed with its return value? Not when it
    called ``complete`` or ``complete_error`` itself: completing again would overwrite that
    result (a stored error read back as a success)."""
    return not claim.completed


def _log_unstored(
    record: ConsumerRecord[Any, Any], refused: NotSerializable, result_type: type | None
) -> None:
    refused_type = "a result" if result_type is None else f"a {result_type.__qualname__}"
    log.warning(
        "%s[%d]@%d: the serializer refused %s (%s); the effect ran, so its claim completed "
        "with no result (a repeat reads None) and the offset is committed",
        record.topic,
        record.partition,
        record.offset,
        refused_type,
        refused,
    )


async def _run_claimed(
    claiming: ClaimContext,
    record: ConsumerRecord[Any, Any],
    handler: Callable[[Claim], Awaitable[Any]],
    on_repeat: Callable[[Repeat], Any] | None,
    stats: ConsumerStats,
) -> Any:
    """One try of ``record`` under its claim: a repeat answers the first result (or what
    ``on_repeat`` returns); else ``handler(claim)`` runs and the claim completes with its
    return value, unless the handler completed it itself. Returns the answer."""
    claim: Claim | None = None
    try:
        async with claiming as claim:
            if claim.done:
                stats.repeats += 1
                return await answer_repeat(on_repeat, claim, record)
            result = await handler(claim)
            if _left_open(claim):
                try:
                    claim.complete(result)
                except NotSerializable as refused:
                    # Caught inside the block so that the claim completes with no result
                    # (joined too: the effect commits with it). The effect ran: raising
                    # would have the policy retry it (a repeat now) or dead-letter a record
                    # whose effect is done.
                    stats.unstored += 1
                    _log_unstored(record, refused, type(result))
    except NotSerializable as refused:
        # The handler's own complete() refused its result and the handler let it out. Not
        # joined, the claim completed as it left (the effect is done): the same as above.
        # Joined, the error rolled the effect back with the claim: a failure like any other.
        if claim is None or refused is not claim.unstored or claim.connection is not None:
            raise
        stats.unstored += 1
        _log_unstored(record, refused, None)
        result = None
    stats.processed += 1
    return result


async def _handle_record(
    policy: ErrorPolicy,
    record: ConsumerRecord[Any, Any],
    attempt: Callable[[], Awaitable[Any]],
    pause: Callable[[float], Awaitable[bool]],
    stats: ConsumerStats,
    *,
    hand_back: bool = True,
) -> tuple[_Handled, Any]:
    """``attempt()`` (one try of ``record``) through ``policy``: returns how it ended and the
    answer (None when recovered or not done). ``pause(seconds)`` waits between two tries
    and returns False when the record is no longer this consumer's. ``hand_back``: past
    ``policy.in_progress_wait`` of waiting for another holder, return ``HELD`` (the caller
    polls again and retries); False keeps waiting. Raises what the policy does not recover."""
    failures = 0
    held_tries = 0
    held_since: float | None = None
    while True:
        try:
            return _Handled.DONE, await attempt()
        except AlreadyInProgress as busy:
            stats.in_progress += 1
            held_tries += 1
            now = time.monotonic()
            if held_since is None:
                held_since = now
            if now - held_since >= policy.in_progress_wait.total_seconds():
                log.warning(
                    "%s[%d]@%d: its id is still held by another consumer after %.1f s (%s)%s",
                    record.topic,
                    record.partition,
                    record.offset,
                    now - held_since,
                    busy,
                    ": polling again, it is tried again next" if hand_back else "; waiting on",
                )
                if hand_back:
                    return _Handled.HELD, None
                held_since = now
            seconds = policy.holder_pause(busy, held_tries)
            log.info(
                "%s[%d]@%d: %s; trying again in %.3f s (not a failure)",
                record.topic,
                record.partition,
                record.offset,
                busy,
                seconds,
            )
            if not await pause(seconds):
                return _Handled.LEFT, None
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
                if not await pause(policy.pause(failures)):
                    return _Handled.LEFT, None
                stats.retries += 1
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
            stats.recovered += 1
            return _Handled.DONE, None


class IdempotentConsumer:
    """Reads ``topics`` with read_committed and calls ``handler(record, claim)`` once per
    event id and processor; the handler's return value is the result a repeat gets back,
    unless the handler completed the claim itself (``claim.complete`` or
    ``claim.complete_error``: that result is kept).

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
                handled, _ = await _handle_record(
                    self.errors,
                    record,
                    functools.partial(self.process, record),
                    lambda seconds: self._pause_while_ours(tp, seconds),
                    self.stats,
                )
                if handled is _Handled.HELD:
                    # Not done, and not failed: read it again from the next poll on (the
                    # records after it in this batch too), so the consumer keeps polling.
                    # A partition revoked meanwhile is its next owner's to read.
                    if tp in self.consumer.assignment():
                        self.consumer.seek(tp, record.offset)
                    break
                if handled is _Handled.LEFT:
                    break  # revoked or stopping between two tries: not done
                done_up_to = record.offset + 1
        finally:
            if done_up_to is not None:
                await self._commit(tp, done_up_to)

    async def _pause_while_ours(self, tp: TopicPartition, seconds: float) -> bool:
        """Sleep between two tries, cut short by ``stop()``; False when the partition was
        revoked or the consumer is stopping by then."""
        stopping = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({stopping}, timeout=seconds)
        finally:
            stopping.cancel()
        return tp in self.consumer.assignment() and not self._stopping.is_set()

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
        async def handler(claim: Claim) -> Any:
            return await self.handler(record, claim)

        claiming = self.idempotency.claim(
            event_id, payload=self.payload(record), wait=True, connection=conn
        )
        return await _run_claimed(claiming, record, handler, self.on_repeat, self.stats)

    async def _commit(self, tp: TopicPartition, offset: int) -> None:
        try:
            await self.consumer.commit({tp: OffsetAndMetadata(offset, "")})
            self.stats.commits += 1
        except (CommitFailedError, IllegalStateError) as exc:
            # The partition went to another member; the records done here are completed
            # claims, so the next owner's redelivery of them is a repeat.
            self.stats.failed_commits += 1
            log.warning("commit of %s at %d failed (%s); the next owner resumes", tp, offset, exc)
