"""The transaction v2 (KIP-890) flow for a task's aiokafka producer, as the Java client runs it
when the cluster finalized ``transaction.version >= 2`` (apache/kafka
``clients/.../producer/internals/TransactionManager.java``, ``Sender.java``):

- InitProducerId v5 (it tells the coordinator the client handles TRANSACTION_ABORTABLE);
- no AddPartitionsToTxn: a Produce v12 of a transactional producer makes the partition leader
  add its partition to the transaction (``maybeAddPartition`` only records it locally);
- no AddOffsetsToTxn: TxnOffsetCommit v5 makes the group coordinator add the offsets topic;
- EndTxn v5: the coordinator bumps the producer epoch at every commit or abort and returns the
  producer id and epoch, which the next transaction uses, with its sequences back at 0
  (``EndTxnHandler``: ``setProducerIdAndEpoch`` then ``resetSequenceNumbers``), so a Produce
  request delayed past its transaction's end is refused (old epoch) instead of landing in the
  next one;
- TRANSACTION_ABORTABLE (error 120) on a Produce, TxnOffsetCommit or EndTxn: the transaction
  can only be aborted.

Where aiokafka's transaction state and the Java client's differ, the v2 flow follows Java's:

- a transaction a record or the offsets joined is *started* (``transactionStarted``) and always
  ends with EndTxn, abort included: aiokafka forgets the partitions on an abortable error and
  then ends the abort locally, which under v2 (the broker added the partitions) leaves the
  broker's transaction open, readers stalled at it and the epoch unbumped;
- a failed record batch makes the transaction abortable (``TransactionManager
  .handleFailedBatch`` -> ``maybeTransitionToErrorState``): the producer itself refuses to
  commit, whoever checks the send futures;
- a retriable error on TxnOffsetCommit (CONCURRENT_TRANSACTIONS while the previous
  transaction's markers are written, NETWORK_EXCEPTION, ...) is retried
  (``TxnOffsetCommitHandler``: ``error.exception() instanceof RetriableException``); aiokafka
  raises it in its sender task, which ends the producer.

aiokafka (0.14) sends the oldest versions only; its ``Sender`` picks each request from a
handler class, and its ``TransactionManager`` keeps the transaction's partitions, group and
producer state. :func:`use_v2` gives a producer (before ``start()``) the subclasses below,
which change exactly those steps; everything else (batching, retries, the coordinator lookup,
the state machine) is aiokafka's. The request and response structures (versions, flexible
encoding: compact strings and arrays, tagged fields) are in :mod:`app.eos.txn_messages`.
"""

from __future__ import annotations

from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.client import CoordinationType
from aiokafka.errors import (
    GroupAuthorizationFailedError,
    KafkaError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.producer.transaction_manager import TransactionState
from aiokafka.structs import TopicPartition

from adapters.aiokafka_privates import (
    EndTxnShim,
    InitPIDShim,
    ProduceShim,
    SenderShim,
    TransactionManagerShim,
    TxnOffsetCommitShim,
    swap_in,
    txn_manager,
)
from app.eos.txn_messages import (
    TRANSACTION_ABORTABLE,
    EndTxnV5,
    InitProducerIdV5,
    ProduceV12,
    TxnOffsetCommitV5,
)


class TransactionAbortable(KafkaError):  # type: ignore[misc]
    """TRANSACTION_ABORTABLE (120): the broker asks the client to abort the transaction."""

    errno = TRANSACTION_ABORTABLE


#: PRODUCER_FENCED, which aiokafka does not know either: the versions it sends get
#: INVALID_PRODUCER_EPOCH instead (InitProducerId v4+, EndTxn v2+ get this one).
PRODUCER_FENCED = 90
INVALID_PRODUCER_EPOCH = 47


#: The errors of the broker's check that a partition is in the open transaction (KIP-890's
#: verification) that pass: CONCURRENT_TRANSACTIONS (the previous transaction's markers are
#: still being written), NETWORK_EXCEPTION, COORDINATOR_LOAD_IN_PROGRESS,
#: COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR. Older Produce versions get them as
#: NOT_ENOUGH_REPLICAS, "an error which will cause such clients to retry" (ReplicaManager's
#: postVerificationCallback); a transactions-v2 Produce can get them as they are, and the Java
#: client retries them (ConcurrentTransactionsException is a RetriableException). aiokafka's
#: handler does not know CONCURRENT_TRANSACTIONS as retriable and would fail the batch.
VERIFICATION_RETRIABLE = frozenset({51, 13, 14, 15, 16})
NOT_ENOUGH_REPLICAS = 19
CONCURRENT_TRANSACTIONS = 51
COORDINATOR_LOAD_IN_PROGRESS = 14

#: TxnOffsetCommit errors that are Kafka ``RetriableException``s and that aiokafka's handler
#: does not retry (it retries COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
#: NOT_COORDINATOR, REQUEST_TIMED_OUT and UNKNOWN_TOPIC_OR_PARTITION itself): NETWORK_EXCEPTION,
#: NOT_ENOUGH_REPLICAS(_AFTER_APPEND) (the offsets' append) and CONCURRENT_TRANSACTIONS (under v2
#: the group coordinator adds the offsets partition to the transaction, and the coordinator
#: answers this while the previous transaction's markers are being written).
OFFSET_COMMIT_RETRIABLE = frozenset({13, 19, 20, CONCURRENT_TRANSACTIONS})
#: How long to wait before retrying after CONCURRENT_TRANSACTIONS: the previous transaction's
#: markers are being written, which takes milliseconds (aiokafka's and the Java client's
#: override for AddPartitionsToTxn, KAFKA-5477; the default 100 ms backoff would add that to
#: every commit that follows another closely).
CONCURRENT_TRANSACTIONS_BACKOFF = 0.02


def as_old_error(code: int) -> int:
    """``code`` as the older request versions aiokafka's handlers read would have it:
    PRODUCER_FENCED was INVALID_PRODUCER_EPOCH, which they report as ``ProducerFenced``
    (another owner took over: the task stops, it does not retry or start a new producer)."""
    return INVALID_PRODUCER_EPOCH if code == PRODUCER_FENCED else code


def as_old_produce_error(code: int) -> int:
    """A Produce v12 partition error as a Produce v8 answer would carry it: a verification
    error that passes becomes the broker's own translation for older clients, which aiokafka
    retries (with its backoff, without a metadata refresh)."""
    return NOT_ENOUGH_REPLICAS if code in VERIFICATION_RETRIABLE else as_old_error(code)


class _Fields:
    """A decoded response reshaped as aiokafka's handlers read the older version."""

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class InitPidV5Handler(InitPIDShim):
    def create_request(self) -> InitProducerIdV5:
        txn = self.txn
        return InitProducerIdV5(txn.transactional_id, txn.transaction_timeout_ms)

    def handle_response(self, resp: Any) -> float | None:
        if resp.error_code == PRODUCER_FENCED:
            raise ProducerFenced()
        result: float | None = super().handle_response(resp)
        return result


def as_old_offset_commit_error(code: int) -> int:
    """A TxnOffsetCommit v5 partition error as aiokafka's handler of the older version reads
    it: a retriable error it does not know becomes one it retries after its backoff."""
    if code in OFFSET_COMMIT_RETRIABLE:
        return COORDINATOR_LOAD_IN_PROGRESS
    return as_old_error(code)


class ProduceV12Handler(ProduceShim):
    def create_request(self) -> ProduceV12:
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for tp, batch in self.batches.items():
            topics.setdefault(tp.topic, []).append((tp.partition, batch.get_data_buffer()))
        return ProduceV12(self.txn.transactional_id, self.acks, self.request_timeout_ms, topics)

    def handle_response(self, response: Any) -> None:
        # As a v8 response (aiokafka's newest): (partition, error, offset, timestamp, log
        # start offset, record errors, error message). A TRANSACTION_ABORTABLE fails the
        # batch at once: retrying cannot help (the sender then makes the transaction
        # abortable, as for every failed batch).
        topics = []
        for topic, partitions, _tags in response.responses:
            kept = []
            for index, error, offset, ts, start, record_errors, message, _t in partitions:
                batch = self.batches.get(TopicPartition(topic, index))
                if error == TRANSACTION_ABORTABLE and batch is not None:
                    batch.failure(exception=TransactionAbortable(f"{topic}-{index}: {message}"))
                    continue
                error = as_old_produce_error(error)
                kept.append((index, error, offset, ts, start, record_errors, message))
            topics.append((topic, kept))
        super().handle_response(_Fields(API_VERSION=8, topics=topics))


class TxnOffsetCommitV5Handler(TxnOffsetCommitShim):
    def create_request(self) -> TxnOffsetCommitV5:
        txn = self.txn
        return TxnOffsetCommitV5(
            txn.transactional_id,
            self.group_id,
            txn.producer_id,
            txn.producer_epoch,
            {tp: (o.offset, o.metadata) for tp, o in self.offsets.items()},
        )

    def handle_response(self, resp: Any) -> float | None:
        codes = [error for _t, partitions, _ in resp.topics for _p, error, _ in partitions]
        if TRANSACTION_ABORTABLE in codes:
            self.txn.error_transaction(
                TransactionAbortable(f"TxnOffsetCommit for group {self.group_id}")
            )
            return None
        errors = [
            (topic, [(p, as_old_offset_commit_error(error)) for p, error, _t in partitions])
            for topic, partitions, _tags in resp.topics
        ]
        result: float | None = super().handle_response(_Fields(errors=errors))
        if result is not None and CONCURRENT_TRANSACTIONS in codes:
            # The previous transaction's markers are being written: soon done.
            return CONCURRENT_TRANSACTIONS_BACKOFF
        return result


class EndTxnV5Handler(EndTxnShim):
    def create_request(self) -> EndTxnV5:
        txn = self.txn
        return EndTxnV5(
            txn.transactional_id, txn.producer_id, txn.producer_epoch, int(self.commit_result)
        )

    def handle_response(self, resp: Any) -> float | None:
        txn: TransactionManagerV2 = self.txn
        if resp.error_code == 0:
            # The epoch the coordinator bumped to (or a new producer id at epoch 0 when the
            # epoch ran out): the next transaction's records carry it, from sequence 0.
            if resp.producer_id != -1:
                txn.adopt(resp.producer_id, resp.producer_epoch)
            txn.complete_transaction()
            return None
        if resp.error_code == TRANSACTION_ABORTABLE:
            # A commit that can only be aborted now: the caller aborts it (EndTxn(abort)).
            # An abort answered so makes no sense: the producer ends, and its successor's
            # InitProducerId settles the transaction.
            error = TransactionAbortable(f"EndTxn({'commit' if self.commit_result else 'abort'})")
            if self.commit_result:
                txn.error_transaction(error)
            else:
                txn.fatal_error(error)
            return None
        code = as_old_error(resp.error_code)
        result: float | None = super().handle_response(_Fields(error_code=code))
        return result


class SenderV2(SenderShim):
    """aiokafka's sender with the v2 requests (see the module docstring)."""

    async def init_pid(self, node_id: int) -> bool:
        ok: bool = await InitPidV5Handler(self).do(node_id)
        return ok

    async def send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        # As aiokafka's, with the v12 handler; then a batch that failed (not one sent again)
        # fails its transaction, as the Java client's ``handleFailedBatch`` does.
        await ProduceV12Handler(self, batches).do(node_id)
        self.produce_sent(node_id, batches)
        for batch in batches.values():
            fut = batch.future
            if fut.done() and not fut.cancelled() and fut.exception() is not None:
                self.txn.batch_failed(fut.exception())

    async def txn_offset_commit(self, offsets: dict[TopicPartition, Any], group: str) -> None:
        # As aiokafka's, with the v5 handler.
        if not offsets:
            return
        try:
            node_id = await self.find_coordinator(CoordinationType.GROUP, group)
        except GroupAuthorizationFailedError as exc:
            self.txn.error_transaction(exc)
            return
        await TxnOffsetCommitV5Handler(self, offsets, group).do(node_id)

    async def txn_commit(self, commit_result: Any) -> None:
        # As aiokafka's, with the v5 handler: every batch acknowledged first; a transaction
        # that never started (no record, no offsets) ends locally, as the Java client's
        # ``nextRequest`` does; a started one always sends EndTxn, an abort after an error too.
        await self.flush_for_commit()
        txn = self.txn
        if txn.needs_transaction_commit() != commit_result:
            # A batch failed while they were flushed: the commit failed with it (the Java
            # client's ``maybeTerminateRequestWithError``); only an abort may follow.
            return
        if txn.is_empty_transaction():
            txn.complete_transaction()
            return
        node_id = await self.find_coordinator(CoordinationType.TRANSACTION, txn.transactional_id)
        await EndTxnV5Handler(self, commit_result).do(node_id)


#: The states an abortable error may come from (Java's ``State.isTransitionValid`` for
#: ABORTABLE_ERROR, less ABORTABLE_ERROR itself: a second error changes nothing here).
ABORTABLE_FROM = (TransactionState.IN_TRANSACTION, TransactionState.COMMITTING_TRANSACTION)
#: Batch errors that end the producer, not only the transaction (Java's
#: ``maybeTransitionToErrorState``: fenced, or the transactional id not authorized).
FATAL_BATCH_ERRORS = (ProducerFenced, TransactionalIdAuthorizationFailed)


class TransactionManagerV2(TransactionManagerShim):
    """aiokafka's transaction state, with partitions and offsets added by the broker and the
    Java client's ``transactionStarted`` (see the module docstring)."""

    #: A record or the offsets joined the open transaction: it ends with EndTxn, whatever
    #: error came first. (A class default: :func:`use_v2` swaps the class of a live object.)
    started = False

    def maybe_add_partition_to_txn(self, tp: TopicPartition) -> None:
        # Recorded only; the Produce request adds it (and the transaction has started).
        if self.transactional_id is None:
            return
        assert self.is_in_transaction()
        self.record_partition(tp)
        self.started = True

    def add_offsets_to_txn(self, offsets: Any, group_id: str) -> Any:
        # No AddOffsetsToTxn: the group counts as added, so the sender goes straight to
        # TxnOffsetCommit (and the transaction has started).
        self.group_added(group_id)
        self.started = True
        return super().add_offsets_to_txn(offsets, group_id)

    def is_empty_transaction(self) -> bool:
        # aiokafka asks its partitions and group, which an abortable error clears.
        return not self.started

    def complete_transaction(self) -> None:
        super().complete_transaction()
        self.started = False

    def error_transaction(self, exc: BaseException) -> None:
        """The transaction can only be aborted (``exc`` is what a commit raises). Ignored
        while it is being aborted, after a first such error, and once the producer failed
        (Java's ``transitionToAbortableError``)."""
        if self.state in ABORTABLE_FROM:
            super().error_transaction(exc)

    def batch_failed(self, exc: BaseException) -> None:
        """A record batch of the open transaction failed for good (Java's
        ``maybeTransitionToErrorState``): fenced or not authorized ends the producer,
        anything else the transaction."""
        if isinstance(exc, FATAL_BATCH_ERRORS):
            if not self.is_fatal_error():
                self.fatal_error(exc)
        else:
            self.error_transaction(exc)


def use_v2(producer: AIOKafkaProducer) -> None:
    """Make ``producer`` (transactional, not started) run the v2 flow."""
    swap_in(producer, TransactionManagerV2, SenderV2)


def is_v2(producer: AIOKafkaProducer) -> bool:
    return isinstance(txn_manager(producer), TransactionManagerV2)


__all__ = ["TransactionAbortable", "is_v2", "use_v2"]
