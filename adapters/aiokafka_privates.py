"""aiokafka's private and undocumented members, named in this module only: an upgrade that
renames one breaks here, and ``tests/unit/test_private_names.py`` says which.

One function per use of the producer's and consumer's internals (named for what it does), and
shims of the classes the transactions-v2 flow subclasses (``app/eos/txn_v2.py``): each private
step calls a public name whose default is aiokafka's step, and private attributes read through
properties. :data:`PRIVATE_NAMES` lists every member the worker relies on with where it is used.
This module imports only aiokafka.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.producer.message_accumulator import MessageAccumulator, MessageBatch
from aiokafka.producer.sender import (
    EndTxnHandler,
    InitPIDHandler,
    Sender,
    SendProduceReqHandler,
    TxnOffsetCommitHandler,
)
from aiokafka.producer.transaction_manager import PidAndEpoch, TransactionManager
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

# -- the producer ----------------------------------------------------------------------------


async def flush_for_commit(producer: AIOKafkaProducer) -> None:
    """Send every batch ``producer`` holds now, without its linger, and wait for the acks."""
    await producer._message_accumulator.flush_for_commit()


def txn_manager(producer: AIOKafkaProducer | None) -> TransactionManager | None:
    """The transaction state of ``producer`` (None: no producer, or not transactional)."""
    txn: TransactionManager | None = getattr(producer, "_txn_manager", None)
    return txn


def sender_task(producer: AIOKafkaProducer) -> asyncio.Task[Any] | None:
    """The task that runs ``producer``'s sender loop (None: not started)."""
    task: asyncio.Task[Any] | None = producer._sender.sender_task
    return task


def held_batch_futures(producer: AIOKafkaProducer) -> Iterator[asyncio.Future[Any]]:
    """Every future of the batches ``producer`` still holds (queued or pending): their own,
    their drain waiters and their messages'."""
    acc = producer._message_accumulator
    for batch in (*(b for bs in acc._batches.values() for b in bs), *acc._pending_batches):
        yield from (batch.future, batch._drain_waiter, *(f for f, _ in batch._msg_futures))


def fail_held_batches(producer: AIOKafkaProducer, exc: BaseException) -> None:
    """Fail every batch ``producer`` still holds with ``exc``."""
    producer._message_accumulator.fail_all(exc)


async def close_connections(producer: AIOKafkaProducer) -> None:
    """Close ``producer``'s client connections (its ``stop()`` would wait for the broker)."""
    await producer.client.close()


def add_partition_by_request(producer: AIOKafkaProducer, tp: TopicPartition) -> None:
    """Make the next commit or abort add ``tp`` to the transaction (AddPartitionsToTxn) even
    with no record for it."""
    producer._txn_manager.maybe_add_partition_to_txn(tp)


# -- the consumer ----------------------------------------------------------------------------


def set_fetch_max_wait(consumer: AIOKafkaConsumer, seconds: float) -> None:
    """Kafka's fetch.max.wait.ms of a consumer already built (Faust builds it with 1.5 s)."""
    consumer._fetch_max_wait_ms = round(seconds * 1000)


def rejoin_request(consumer: AIOKafkaConsumer) -> Callable[[], None]:
    """The call that asks ``consumer``'s group coordinator for a rebalance (to run on the
    consumer's own loop)."""
    request: Callable[[], None] = consumer._coordinator.request_rejoin
    return request


def swap_in(producer: AIOKafkaProducer, txn_class: type, sender_class: type) -> None:
    """Give ``producer`` (transactional, not started) other classes for its transaction state
    and sender, in place: aiokafka builds both in the producer's constructor, and its sender,
    accumulator and client share the one transaction-state object."""
    assert producer._txn_manager is not None and producer._txn_manager.transactional_id
    producer._txn_manager.__class__ = txn_class
    producer._sender.__class__ = sender_class


# -- shims of the classes the transactions-v2 flow subclasses --------------------------------


class SenderShim(Sender):  # type: ignore[misc]
    """aiokafka's sender; override :meth:`init_pid`, :meth:`send_produce_req`,
    :meth:`txn_offset_commit` and :meth:`txn_commit` (aiokafka's steps by default)."""

    async def _do_init_pid(self, node_id: int) -> bool:
        return await self.init_pid(node_id)

    async def init_pid(self, node_id: int) -> bool:
        ok: bool = await super()._do_init_pid(node_id)
        return ok

    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        await self.send_produce_req(node_id, batches)

    async def send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        await super()._send_produce_req(node_id, batches)

    async def _do_txn_offset_commit(self, offsets: dict[TopicPartition, Any], group: str) -> None:
        await self.txn_offset_commit(offsets, group)

    async def txn_offset_commit(self, offsets: dict[TopicPartition, Any], group: str) -> None:
        await super()._do_txn_offset_commit(offsets, group)

    async def _do_txn_commit(self, commit_result: Any) -> None:
        await self.txn_commit(commit_result)

    async def txn_commit(self, commit_result: Any) -> None:
        await super()._do_txn_commit(commit_result)

    def produce_sent(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        """After a Produce request's response: the node and the partitions may send again."""
        self._in_flight.remove(node_id)
        for tp in batches:
            self._muted_partitions.remove(tp)

    async def find_coordinator(self, kind: Any, key: str) -> int:
        node_id: int = await self._find_coordinator(kind, key)
        return node_id

    async def flush_for_commit(self) -> None:
        await self._message_accumulator.flush_for_commit()

    @property
    def txn(self) -> Any:
        return self._txn_manager


class SenderTxn:
    """The transaction state every request handler reads, through its sender (a mixin of the
    handler shims below, ahead of aiokafka's handler in their bases)."""

    _sender: Any

    @property
    def txn(self) -> Any:
        return self._sender._txn_manager


class InitPIDShim(SenderTxn, InitPIDHandler):  # type: ignore[misc]
    pass


class ProduceShim(SenderTxn, SendProduceReqHandler):  # type: ignore[misc]
    @property
    def acks(self) -> Any:
        return self._sender._acks

    @property
    def request_timeout_ms(self) -> int:
        return int(self._sender._request_timeout_ms)

    @property
    def batches(self) -> dict[TopicPartition, Any]:
        return cast(dict[TopicPartition, Any], self._batches)


class TxnOffsetCommitShim(SenderTxn, TxnOffsetCommitHandler):  # type: ignore[misc]
    @property
    def group_id(self) -> str:
        return str(self._group_id)

    @property
    def offsets(self) -> dict[TopicPartition, Any]:
        return cast(dict[TopicPartition, Any], self._offsets)


class EndTxnShim(SenderTxn, EndTxnHandler):  # type: ignore[misc]
    @property
    def commit_result(self) -> Any:
        return self._commit_result


class TransactionManagerShim(TransactionManager):  # type: ignore[misc]
    """aiokafka's transaction state: its partitions, pending partitions, group and ids."""

    def record_partition(self, tp: TopicPartition) -> None:
        self._txn_partitions.add(tp)

    def request_partition(self, tp: TopicPartition) -> None:
        """Have the sender add ``tp`` with AddPartitionsToTxn (unless it is in already)."""
        if tp not in self._txn_partitions:
            self._pending_txn_partitions.add(tp)
            self.notify_task_waiter()

    def group_added(self, group_id: str) -> None:
        """Count ``group_id`` as added to the transaction (no AddOffsetsToTxn to send)."""
        self._txn_consumer_group = group_id

    def adopt(self, producer_id: int, producer_epoch: int) -> None:
        """Use ``producer_id`` and ``producer_epoch`` from now on, sequences from 0."""
        self._pid_and_epoch = PidAndEpoch(producer_id, producer_epoch)
        self._sequence_numbers.clear()


#: (class, names, where they are used): every aiokafka member the worker relies on; the
#: underscored ones are named in this module only.
_PRODUCER = "_message_accumulator _txn_manager _sender client create_batch send_batch"
_ACCUMULATOR = "flush_for_commit _batches _pending_batches fail_all"
_BATCH = "future _drain_waiter _msg_futures"
_TXN = """is_fatal_error wait_for_transaction_end maybe_add_partition_to_txn producer_id
    producer_epoch _txn_partitions _pending_txn_partitions _txn_consumer_group _pid_and_epoch
    _sequence_numbers notify_task_waiter error_transaction complete_transaction
    is_empty_transaction add_offsets_to_txn transactional_id transaction_timeout_ms"""
_SENDER = """close _txn_manager _acks _request_timeout_ms _message_accumulator _find_coordinator
    _in_flight _muted_partitions _do_init_pid _send_produce_req _do_txn_offset_commit
    _do_txn_commit"""
_CLIENT = "bootstrap send add_topic force_metadata_update cluster close"
_RECORDS = "validate_crc next_offset base_offset producer_id is_control_batch is_transactional"
HERE, V2, READER = "adapters/aiokafka_privates.py", "app/eos/txn_v2.py", "recovery/reader.py"
_GROUPS: list[tuple[type, str, str]] = [
    (AIOKafkaProducer, _PRODUCER, f"{HERE}, app/eos/collector.py"),
    (MessageAccumulator, _ACCUMULATOR, HERE),
    (MessageBatch, _BATCH, HERE),
    (TransactionManager, _TXN, f"{HERE}, app/eos/producer.py, {V2}"),
    (Sender, _SENDER, f"{HERE}, {V2}"),
    (InitPIDHandler, "create_request handle_response _sender", f"{HERE}, {V2}"),
    (SendProduceReqHandler, "create_request handle_response _batches _sender", f"{HERE}, {V2}"),
    (TxnOffsetCommitHandler, "create_request handle_response _offsets _group_id _sender", V2),
    (EndTxnHandler, "create_request handle_response _commit_result _sender", f"{HERE}, {V2}"),
    (AIOKafkaConsumer, "_fetch_max_wait_ms _coordinator", HERE),
    (GroupCoordinator, "request_rejoin", HERE),
    (AIOKafkaClient, _CLIENT, READER),
    (ClusterMetadata, "leader_for_partition", READER),
    (FetchRequest, "build", READER),
    (OffsetRequest, "build", READER),
    (MemoryRecords, "has_next next_batch", READER),
    (DefaultRecordBatch, _RECORDS, READER),
]
PRIVATE_NAMES: list[tuple[type, str, str]] = [
    (cls, name, where) for cls, names, where in _GROUPS for name in names.split()
]
