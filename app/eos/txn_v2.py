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
from aiokafka.errors import GroupAuthorizationFailedError, KafkaError, ProducerFenced
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


class ProduceV12Handler(ProduceShim):
    def create_request(self) -> ProduceV12:
        topics: dict[str, list[tuple[int, bytes]]] = {}
        for tp, batch in self.batches.items():
            topics.setdefault(tp.topic, []).append((tp.partition, batch.get_data_buffer()))
        return ProduceV12(self.txn.transactional_id, self.acks, self.request_timeout_ms, topics)

    def handle_response(self, response: Any) -> None:
        # As a v8 response (aiokafka's newest): (partition, error, offset, timestamp, log
        # start offset, record errors, error message). A TRANSACTION_ABORTABLE fails the
        # batch at once: retrying cannot help, the commit sees the send error and aborts.
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
        errors = [
            (topic, [(p, as_old_error(error)) for p, error, _t in partitions])
            for topic, partitions, _tags in resp.topics
        ]
        if any(e == TRANSACTION_ABORTABLE for _, parts in errors for _, e in parts):
            self.txn.error_transaction(
                TransactionAbortable(f"TxnOffsetCommit for group {self.group_id}")
            )
            return None
        result: float | None = super().handle_response(_Fields(errors=errors))
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
            txn.error_transaction(TransactionAbortable("EndTxn"))
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
        # As aiokafka's, with the v12 handler.
        await ProduceV12Handler(self, batches).do(node_id)
        self.produce_sent(node_id, batches)

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
        # that sent nothing ends locally (the Java client's ``nextRequest`` does the same).
        await self.flush_for_commit()
        txn = self.txn
        if txn.is_empty_transaction():
            txn.complete_transaction()
            return
        node_id = await self.find_coordinator(CoordinationType.TRANSACTION, txn.transactional_id)
        await EndTxnV5Handler(self, commit_result).do(node_id)


class TransactionManagerV2(TransactionManagerShim):
    """aiokafka's transaction state, with partitions and offsets added by the broker."""

    def maybe_add_partition_to_txn(self, tp: TopicPartition) -> None:
        # Recorded only (the transaction is not empty); the Produce request adds it.
        if self.transactional_id is None:
            return
        assert self.is_in_transaction()
        self.record_partition(tp)

    def add_partition_by_request(self, tp: TopicPartition) -> None:
        """Add ``tp`` with AddPartitionsToTxn although no record goes there (a marker-only
        transaction, app/eos/hanging.py): the old request still adds it on a v2 cluster."""
        assert self.is_in_transaction()
        self.request_partition(tp)

    def add_offsets_to_txn(self, offsets: Any, group_id: str) -> Any:
        # No AddOffsetsToTxn: the group counts as added, so the sender goes straight to
        # TxnOffsetCommit (and the transaction is not empty).
        self.group_added(group_id)
        return super().add_offsets_to_txn(offsets, group_id)


def use_v2(producer: AIOKafkaProducer) -> None:
    """Make ``producer`` (transactional, not started) run the v2 flow."""
    swap_in(producer, TransactionManagerV2, SenderV2)


def is_v2(producer: AIOKafkaProducer) -> bool:
    return isinstance(txn_manager(producer), TransactionManagerV2)


def txn_v2_manager(producer: AIOKafkaProducer) -> TransactionManagerV2:
    """The v2 transaction state of ``producer`` (one :func:`use_v2` was given)."""
    txn = txn_manager(producer)
    assert isinstance(txn, TransactionManagerV2)
    return txn


__all__ = ["TransactionAbortable", "is_v2", "txn_v2_manager", "use_v2"]
