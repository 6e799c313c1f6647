"""A task's transactional producer: create, start (which fences older owners), close; how its
failures are classified. aiokafka's private names it needs are reached through
``adapters/aiokafka_privates.py``.

One producer per task, ``transactional.id = "<app id>-<input topic>-<p>"``: stable across
deploys and restarts, so a restarted or new owner of ``p`` fences the old one. Neither aiokafka's
transaction protocol nor transactions v2 (``txn_v2.py``, when ``txn_protocol.py`` chose it) has
KIP-447 group fencing here, so after a commit whose outcome is unknown the producer is never
aborted: it is closed and started again with the same id (``InitProducerId`` completes or
aborts the pending transaction on the broker).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeAlias

from aiokafka import AIOKafkaProducer
from aiokafka.errors import (
    IllegalOperation,
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    ProducerFenced,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.structs import TopicPartition

from adapters import aiokafka_privates, built_batches, fetched_records
from app.eos.collector import MAX_BATCH_BYTES, RecordCollector, retrieve_exception_later
from app.eos.txn_v2 import TransactionAbortable, is_v2, use_v2

if TYPE_CHECKING:
    from app.eos.settings import EosSettings
    from app.eos.txn_protocol import TransactionProtocol

log = logging.getLogger(__name__)

FENCING_ERRORS = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed)

#: A compression setting's value -> the codec bits of a record batch.
CODECS = {
    "none": 0,
    "gzip": DefaultRecordBatch.CODEC_GZIP,
    "snappy": DefaultRecordBatch.CODEC_SNAPPY,
    "lz4": DefaultRecordBatch.CODEC_LZ4,
    "zstd": DefaultRecordBatch.CODEC_ZSTD,
}


async def send_lingering(producer: AIOKafkaProducer) -> None:
    """Send every batch the producer holds now, without waiting for its linger, and wait until
    the broker acknowledged them (aiokafka does this itself inside ``commit_transaction``;
    the commit needs the acknowledged offsets before it asks to commit)."""
    await aiokafka_privates.flush_for_commit(producer)


def producer_id_and_epoch(producer: AIOKafkaProducer) -> tuple[int, int]:
    """The producer id and epoch the next records of ``producer`` carry (with transactions v2
    the epoch rises at every commit or abort)."""
    txn = aiokafka_privates.txn_manager(producer)
    assert txn is not None, "a transactional producer"
    return txn.producer_id, txn.producer_epoch


def abandon(waiter: asyncio.Future[None] | None) -> None:
    """Stop waiting for a commit whose answer we no longer wait for (timed out, or the task
    stopped). Its request stays out (``commit_transaction`` shields it) and the outcome is
    settled otherwise; left pending, the waiter would be destroyed with its producer
    ("Task was destroyed but it is pending"; fault row F8 fails on it)."""
    if waiter is not None and not waiter.done():
        waiter.cancel()


def is_fenced(producer: AIOKafkaProducer | None, exc: BaseException) -> bool:
    """True when ``exc`` (or the error that broke ``producer``) says another owner took over.

    aiokafka reports fencing on the request that met it; later calls on the same producer fail
    with ``IllegalOperation``, so the producer's own fatal error is checked too.
    """
    if isinstance(exc, FENCING_ERRORS):
        return True
    txn = aiokafka_privates.txn_manager(producer)
    if txn is None or not txn.is_fatal_error():
        return False
    waiter = txn.wait_for_transaction_end()
    return bool(
        waiter.done() and not waiter.cancelled() and isinstance(waiter.exception(), FENCING_ERRORS)
    )


def is_commit_refused(producer: AIOKafkaProducer | None, exc: BaseException) -> bool:
    """True when a commit request failed with a known outcome, not committed: the broker
    answered TRANSACTION_ABORTABLE (transactions v2), or the producer holds an abortable error
    and never sent it. Only an abort may follow (the Java client's ``ABORTABLE_ERROR``)."""
    if isinstance(exc, TransactionAbortable):
        return True
    txn = aiokafka_privates.txn_manager(producer)
    return txn is not None and txn.state is TransactionState.ABORTABLE_ERROR


def is_transaction_error(producer: AIOKafkaProducer | None, exc: BaseException) -> bool:
    """True when ``exc`` is the transaction's failure (Kafka's, or the producer refusing to send
    once it was fenced: aiokafka's ``IllegalOperation`` is no ``KafkaError``), not a bug."""
    return isinstance(exc, KafkaError | IllegalOperation) or is_fenced(producer, exc)


async def force_close(producer: AIOKafkaProducer, wait: float) -> None:
    """Close ``producer`` after its ``stop()`` was cut short (it waits for the broker to take
    what it holds, and a paused broker never does): stop its sender and close its connections,
    so no producer of a given-up transaction lives on, sends once the broker is back, and then
    fails futures nobody awaits (every producer we drop is fenced anyway).

    The wait for the cancelled sender is bounded by ``wait`` seconds (more than its requests'
    timeout): a cancelled sender waits for its request in flight, and an abort in flight waits
    for the batches of its transaction to be sent (aiokafka's ``flush_for_commit``), which only
    the sender would do, so unbounded it waits forever when the broker is paused while an
    abort is in flight (fault row F8). The held batches are failed only after that wait:
    failing a batch still in flight breaks aiokafka's own bookkeeping of it."""
    try:
        sender = aiokafka_privates.sender_task(producer)
        if sender is not None and not sender.done():
            sender.cancel()
            done, _pending = await asyncio.wait({sender}, timeout=wait)
            if not done:
                retrieve_exception_later(sender)
                log.warning(
                    "a dropped transactional producer's sender did not stop in %.0fs (a request "
                    "in flight waits for batches it holds): failing them",
                    wait,
                )
        # stop() waits for the batches still held to be sent: fail them (quietly) so it ends.
        for fut in aiokafka_privates.held_batch_futures(producer):
            retrieve_exception_later(fut)
        dropped = KafkaConnectionError("the transactional producer was dropped")
        aiokafka_privates.fail_held_batches(producer, dropped)
        await aiokafka_privates.close_connections(producer)
    except Exception as exc:  # closing what is already broken: nothing more to do
        log.warning("dropping a transactional producer: %r", exc)


async def commit_markers(producer: AIOKafkaProducer, tps: list[TopicPartition]) -> None:
    """Commit a transaction of ``producer`` that adds ``tps`` and writes no record: the broker
    writes a commit marker, with the producer's current epoch, on each of them. A marker of a
    newer epoch ends whatever transaction an older epoch of the same producer left open there
    (app/eos/hanging.py). Only the old flow adds a partition without a record
    (AddPartitionsToTxn): ``producer`` must run it."""
    if is_v2(producer):
        raise ValueError("a record-less transaction needs a producer on the old flow")
    await producer.begin_transaction()
    for tp in tps:
        aiokafka_privates.add_partition_by_request(producer, tp)
    await producer.commit_transaction()  # the sender adds the partitions first


async def probe_transactional_writes(
    settings: EosSettings, transactional_id: str, tps: list[TopicPartition]
) -> set[str]:
    """The topics of ``tps`` this principal may not write in a transaction (the start-up probe
    of app/admin/access.py). A producer with ``transactional_id`` adds ``tps`` to a transaction
    (AddPartitionsToTxn, which checks Write on each topic) and aborts it: nothing is written
    but abort markers. Raises TransactionalIdAuthorizationFailed when the id is denied."""
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        **settings.kafka_client_kwargs(),
        transactional_id=transactional_id,
        request_timeout_ms=30_000,
    )
    try:
        await producer.start()  # InitProducerId: Write on the transactional id
        await producer.begin_transaction()
        for tp in tps:
            aiokafka_privates.add_partition_by_request(producer, tp)
        try:
            await producer.abort_transaction()  # the sender adds the partitions first
        except TopicAuthorizationFailedError as exc:
            return {str(t) for t in exc.args[0]}
        return set()
    finally:
        await producer.stop()


class TransactionalProducers:
    """Creates, starts and closes the tasks' transactional producers: the worker's one client
    supplier (Kafka Streams' ``KafkaClientSupplier.getProducer``). The factory chooses which
    supplier the worker runs on (:data:`ProducerSupplier`); the fault tests' one
    (``app/faults/producers.py``) overrides :meth:`create` and :meth:`collector` only, so
    production runs exactly the clients below."""

    def __init__(self, settings: EosSettings, should_stop: Callable[[], bool]) -> None:
        self.settings = settings
        self._should_stop = should_stop
        #: The transaction protocol the producers run (app/eos/txn_protocol.py), chosen at
        #: start-up before the first task starts (:meth:`use_protocol`).
        self.protocol: TransactionProtocol | None = None
        # The batches the tasks build (RecordCollector): the output's (clean and dead-letter
        # topics) compressed as the producer's DEDUPE_COMPRESSION, the changelogs' as
        # DEDUPE_CHANGELOG_COMPRESSION (a producer has one compression for every topic: the
        # changelogs' small records cost little to compress, the clean topic's events more).
        # Built natively unless DEDUPE_NATIVE_RECORDS is off or the extension is missing.
        native = fetched_records.for_setting(settings.native_records)
        #: Makes an empty transactional batch for an output topic's partition.
        self.output_batch = built_batches.batch_maker(
            native, MAX_BATCH_BYTES, CODECS[settings.compression]
        )
        #: Makes an empty transactional batch for a changelog partition.
        self.changelog_batch = built_batches.batch_maker(
            native, MAX_BATCH_BYTES, CODECS[settings.changelog_compression]
        )

    def use_protocol(self, protocol: TransactionProtocol) -> None:
        """Run ``protocol`` (detected once, before any task's producer starts)."""
        self.protocol = protocol

    def transactional_id(self, partition: int) -> str:
        """Stable per (app, input topic, partition): survives deploys and topology changes."""
        return f"{self.settings.app_id}-{self.settings.input_topic}-{partition}"

    def new(self, partition: int, *, old_flow: bool = False) -> AIOKafkaProducer:
        """A producer of ``partition``'s transactional id, not started, on the protocol chosen
        at start-up (``old_flow``: aiokafka's own, whatever was chosen: the record-less
        transactions of app/eos/hanging.py)."""
        s = self.settings
        producer = self.create(
            partition,
            bootstrap_servers=s.bootstrap_servers,
            **s.kafka_client_kwargs(),
            client_id=f"{self.transactional_id(partition)}-producer",
            transactional_id=self.transactional_id(partition),
            transaction_timeout_ms=int(s.transaction_timeout * 1000),
            enable_idempotence=True,
            acks="all",
            # The task builds its batches (RecordCollector) and hands them over when full or
            # at the commit: nothing to linger for.
            linger_ms=0,
            max_batch_size=MAX_BATCH_BYTES,
            # The clean and dead-letter topics' batches; the changelogs' are built by
            # :meth:`changelog_batch`.
            compression_type=None if s.compression == "none" else s.compression,
            max_request_size=s.dlq_max_message_bytes,
            request_timeout_ms=int(self.request_timeout * 1000),
        )
        if self.protocol is not None and self.protocol.running == "v2" and not old_flow:
            use_v2(producer)
        return producer

    def create(self, partition: int, **config: Any) -> AIOKafkaProducer:
        """The producer client of ``partition``'s task, made from ``config``."""
        return AIOKafkaProducer(**config)

    def collector(self) -> RecordCollector:
        """What a new task collects its open transaction's records in (it builds the batches
        the producer sends)."""
        return RecordCollector(self.output_batch)

    @property
    def request_timeout(self) -> float:
        """Seconds before a transactional producer's request times out: the commit timeout, at
        most 30."""
        return min(self.settings.commit_timeout, 30.0)

    async def start(self, partition: int) -> AIOKafkaProducer:
        """A started producer for ``partition``, retried until the broker answers.

        ``start()`` sends InitProducerId: it fences any older producer with this transactional
        id and completes or aborts the transaction that one left open, so afterwards the
        partition's offsets and changelog are final. While the cluster is unreachable aiokafka
        fails in several ways (timeouts, connection errors, an assertion during bootstrap);
        none of them is an answer, so try again with a fresh producer.
        """
        delay = 0.2
        while True:
            producer = self.new(partition)
            try:
                await producer.start()
                return producer
            except Exception as exc:
                log.warning(
                    "partition %d: starting transactional producer failed (%r); retrying in %.1fs",
                    partition,
                    exc,
                    delay,
                )
                await self.close(producer)
                if self._should_stop():
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def close(self, producer: AIOKafkaProducer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), timeout=self.settings.commit_timeout)
        except Exception as exc:  # closing runs in rebalance callbacks: never raise there
            log.warning("closing a transactional producer failed (%r): dropping it", exc)
            # Long enough for two of its requests to time out, and a backoff.
            await force_close(producer, 2 * self.request_timeout + 1.0)


#: Makes the worker's client supplier from its settings and a "should stop" test (the factory
#: passes :class:`TransactionalProducers` itself, the fault tests a subclass).
ProducerSupplier: TypeAlias = Callable[["EosSettings", Callable[[], bool]], TransactionalProducers]
