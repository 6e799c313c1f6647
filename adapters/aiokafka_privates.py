"""aiokafka's private and undocumented members, named in this module only: an upgrade that
renames one breaks here, and ``tests/unit/adapters/test_private_names.py`` says which.

One function per use of the producer's and consumer's internals (named for what it does), and
shims of the classes the transactions-v2 flow subclasses (``app/eos/txn_v2.py``): each private
step it replaces calls the public name the subclass defines (one hop, no default relaying back
to aiokafka), and private attributes are read through properties. :data:`PRIVATE_NAMES` lists
every member the worker relies on with where it is used.
This module imports only aiokafka.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import textwrap
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from aiokafka.cluster import ClusterMetadata
from aiokafka.consumer.group_coordinator import GroupCoordinator
from aiokafka.producer.message_accumulator import MessageAccumulator, MessageBatch
from aiokafka.producer.sender import (
    BaseHandler,
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


def use_client(producer: AIOKafkaProducer, client: Any) -> None:
    """Give ``producer`` (not started) another network client: a test's mock, as Kafka's
    ``MockClient`` is handed to a ``KafkaProducer`` (tests/unit/app/eos/kafka_mock.py). Its sender
    sends through it; its accumulator keeps the cluster metadata it was built with."""
    producer.client = client
    producer._sender.client = client


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
    """aiokafka's sender with four request steps replaced, each by the public name the subclass
    defines: :meth:`init_pid`, :meth:`send_produce_req`, :meth:`txn_offset_commit` and
    :meth:`txn_commit`; what those replacements need of the sender under public names."""

    async def _do_init_pid(self, node_id: int) -> bool:
        return await self.init_pid(node_id)

    async def _send_produce_req(self, node_id: int, batches: dict[TopicPartition, Any]) -> None:
        await self.send_produce_req(node_id, batches)

    async def _do_txn_offset_commit(self, offsets: dict[TopicPartition, Any], group: str) -> None:
        await self.txn_offset_commit(offsets, group)

    async def _do_txn_commit(self, commit_result: Any) -> None:
        await self.txn_commit(commit_result)

    if TYPE_CHECKING:  # what the subclass provides

        async def init_pid(self, node_id: int) -> bool: ...
        async def send_produce_req(
            self, node_id: int, batches: dict[TopicPartition, Any]
        ) -> None: ...
        async def txn_offset_commit(
            self, offsets: dict[TopicPartition, Any], group: str
        ) -> None: ...
        async def txn_commit(self, commit_result: Any) -> None: ...

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
_TXN = """state is_fatal_error wait_for_transaction_end maybe_add_partition_to_txn producer_id
    producer_epoch _txn_partitions _txn_consumer_group _pid_and_epoch
    _sequence_numbers error_transaction fatal_error complete_transaction
    is_empty_transaction needs_transaction_commit add_offsets_to_txn transactional_id
    transaction_timeout_ms"""
_SENDER = """client close _txn_manager _acks _request_timeout_ms _message_accumulator
    _find_coordinator _in_flight _muted_partitions _do_init_pid _send_produce_req
    _do_txn_offset_commit _do_txn_commit"""
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

#: aiokafka 0.14.0's methods that the transactions-v2 flow (``app/eos/txn_v2.py``, the shims
#: above) copies, overrides or builds on, with a hash of each one's source in that release
#: (:func:`source_hash`). aiokafka is pinned exactly (pyproject.toml); an upgrade that changes
#: one fails ``tests/unit/app/eos/test_aiokafka_pins.py``, which names it: read the new body against
#: our copy or override, then record the new hash.
#: (class, method, what the v2 flow does with it, hash)
V2_PINNED_SOURCES: list[tuple[type, str, str, str]] = [
    (Sender, "_do_init_pid", "overridden: SenderV2.init_pid", "18cfb0d369254a90"),
    (Sender, "_send_produce_req", "copied: SenderV2.send_produce_req", "5fbb5b444b0f65bd"),
    (Sender, "_do_txn_offset_commit", "copied: SenderV2.txn_offset_commit", "ab4e7128f33ab64e"),
    (Sender, "_do_txn_commit", "copied: SenderV2.txn_commit", "a474e71ab00f2b81"),
    (Sender, "_maybe_do_transactional_request", "the order of the steps", "84a1736c0bd88805"),
    (Sender, "_sender_routine", "mutes partitions_to_add", "c07b5ec56875658f"),
    (BaseHandler, "do", "a backoff answer is retried", "47be65fcbddda09d"),
    (InitPIDHandler, "create_request", "overridden: v5", "5bad4f18f194e329"),
    (InitPIDHandler, "handle_response", "called by the v5 handler", "310b52e848f25e06"),
    (SendProduceReqHandler, "create_request", "overridden: v12", "9e5840ea3ef2fd47"),
    (SendProduceReqHandler, "handle_response", "called with v12 as v8", "552007acc49e7f06"),
    (SendProduceReqHandler, "do", "fails or re-enqueues batches", "89912727d3c89bfb"),
    (TxnOffsetCommitHandler, "create_request", "overridden: v5", "d51e42678ef339a1"),
    (TxnOffsetCommitHandler, "handle_response", "called with v5 as v0", "da2a7e6d89c7b614"),
    (EndTxnHandler, "create_request", "overridden: v5", "0d76c79d2c186fb9"),
    (EndTxnHandler, "handle_response", "called with v5 errors", "0d6dddf7e76dd092"),
    (TransactionManager, "maybe_add_partition_to_txn", "overridden", "db7059aa884626ae"),
    (TransactionManager, "add_offsets_to_txn", "extended", "a177ec82d5014d67"),
    (TransactionManager, "is_empty_transaction", "overridden: started", "3209652e760bca1c"),
    (TransactionManager, "complete_transaction", "extended", "9897bddaf5f294d2"),
    (TransactionManager, "error_transaction", "guarded", "4acd8c0364a2816b"),
    (TransactionManager, "fatal_error", "called on a fatal batch error", "982d6933722826c1"),
    (TransactionManager, "committing_transaction", "refuses after an error", "85b28a337d3ed98f"),
    (TransactionManager, "aborting_transaction", "after an error", "551722fa3f33b3ef"),
    (TransactionManager, "needs_transaction_commit", "read by txn_commit", "a43acf99d21dfc5f"),
]


def source_hash(cls: type, method: str) -> str:
    """The first 16 hex digits of the sha256 of ``cls.method``'s source, dedented."""
    source = textwrap.dedent(inspect.getsource(getattr(cls, method)))
    return hashlib.sha256(source.encode()).hexdigest()[:16]
