"""aiokafka's private and undocumented names that the worker relies on: the one module of
``app/eos/`` (with ``txn_v2.py``, whose subclasses of aiokafka's sender and transaction manager
override private steps by name) that touches them, each behind a function named for what it
does. :data:`PRIVATE_NAMES` lists every one with where it is used;
``tests/unit/test_private_names.py`` checks them against the installed aiokafka and that no
other module of ``app/`` names one, so an aiokafka upgrade that renames one fails there in
seconds, pointing here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from typing import Any

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
from aiokafka.producer.transaction_manager import TransactionManager
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


#: (class, name, where it is used) of every aiokafka name above and in ``txn_v2.py``, plus the
#: undocumented ones other modules call (collector.py, recovery/reader.py).
PRIVATE_NAMES: list[tuple[type, str, str]] = [
    # the producer (this module)
    (AIOKafkaProducer, "_message_accumulator", "aiokafka_privates.py"),
    (AIOKafkaProducer, "_txn_manager", "aiokafka_privates.py"),
    (AIOKafkaProducer, "_sender", "aiokafka_privates.py"),
    (AIOKafkaProducer, "client", "aiokafka_privates.py: close_connections"),
    (AIOKafkaProducer, "create_batch", "collector.py"),
    (AIOKafkaProducer, "send_batch", "collector.py"),
    (MessageAccumulator, "flush_for_commit", "aiokafka_privates.py"),
    (MessageAccumulator, "_batches", "aiokafka_privates.py: held_batch_futures"),
    (MessageAccumulator, "_pending_batches", "aiokafka_privates.py: held_batch_futures"),
    (MessageAccumulator, "fail_all", "aiokafka_privates.py: fail_held_batches"),
    (MessageBatch, "future", "aiokafka_privates.py: held_batch_futures"),
    (MessageBatch, "_drain_waiter", "aiokafka_privates.py: held_batch_futures"),
    (MessageBatch, "_msg_futures", "aiokafka_privates.py: held_batch_futures"),
    (TransactionManager, "is_fatal_error", "producer.py: is_fenced"),
    (TransactionManager, "wait_for_transaction_end", "producer.py: is_fenced"),
    (TransactionManager, "maybe_add_partition_to_txn", "aiokafka_privates.py, producer.py"),
    (TransactionManager, "producer_id", "producer.py: producer_id_and_epoch"),
    (TransactionManager, "producer_epoch", "producer.py: producer_id_and_epoch"),
    (Sender, "close", "producer.py"),
    # the sender and transaction state, subclassed for transactions v2 (txn_v2.py)
    (AIOKafkaProducer, "_sender", "txn_v2.py: use_v2"),
    (Sender, "_txn_manager", "txn_v2.py"),
    (Sender, "_acks", "txn_v2.py: ProduceV12Handler"),
    (Sender, "_request_timeout_ms", "txn_v2.py: ProduceV12Handler"),
    (Sender, "_message_accumulator", "txn_v2.py: SenderV2._do_txn_commit"),
    (Sender, "_find_coordinator", "txn_v2.py: SenderV2"),
    (Sender, "_in_flight", "txn_v2.py: SenderV2._send_produce_req"),
    (Sender, "_muted_partitions", "txn_v2.py: SenderV2._send_produce_req"),
    (Sender, "_do_init_pid", "txn_v2.py: SenderV2 overrides it"),
    (Sender, "_send_produce_req", "txn_v2.py: SenderV2 overrides it"),
    (Sender, "_do_txn_offset_commit", "txn_v2.py: SenderV2 overrides it"),
    (Sender, "_do_txn_commit", "txn_v2.py: SenderV2 overrides it"),
    (InitPIDHandler, "create_request", "txn_v2.py: InitPidV5Handler"),
    (InitPIDHandler, "_sender", "txn_v2.py"),
    (SendProduceReqHandler, "create_request", "txn_v2.py: ProduceV12Handler"),
    (SendProduceReqHandler, "handle_response", "txn_v2.py: ProduceV12Handler"),
    (SendProduceReqHandler, "_batches", "txn_v2.py: ProduceV12Handler"),
    (TxnOffsetCommitHandler, "create_request", "txn_v2.py: TxnOffsetCommitV5Handler"),
    (TxnOffsetCommitHandler, "handle_response", "txn_v2.py: TxnOffsetCommitV5Handler"),
    (TxnOffsetCommitHandler, "_offsets", "txn_v2.py: TxnOffsetCommitV5Handler"),
    (TxnOffsetCommitHandler, "_group_id", "txn_v2.py: TxnOffsetCommitV5Handler"),
    (EndTxnHandler, "create_request", "txn_v2.py: EndTxnV5Handler"),
    (EndTxnHandler, "handle_response", "txn_v2.py: EndTxnV5Handler"),
    (EndTxnHandler, "_commit_result", "txn_v2.py: EndTxnV5Handler"),
    (TransactionManager, "_txn_partitions", "txn_v2.py: TransactionManagerV2"),
    (TransactionManager, "_pending_txn_partitions", "txn_v2.py: add_partition_by_request"),
    (TransactionManager, "_txn_consumer_group", "txn_v2.py: add_offsets_to_txn"),
    (TransactionManager, "_pid_and_epoch", "txn_v2.py: adopt"),
    (TransactionManager, "_sequence_numbers", "txn_v2.py: adopt"),
    (TransactionManager, "notify_task_waiter", "txn_v2.py: add_partition_by_request"),
    (TransactionManager, "error_transaction", "txn_v2.py: TRANSACTION_ABORTABLE"),
    (TransactionManager, "complete_transaction", "txn_v2.py: EndTxnV5Handler"),
    (TransactionManager, "is_empty_transaction", "txn_v2.py: SenderV2._do_txn_commit"),
    (TransactionManager, "add_offsets_to_txn", "txn_v2.py: TransactionManagerV2"),
    # the consumer (this module)
    (AIOKafkaConsumer, "_fetch_max_wait_ms", "aiokafka_privates.py: set_fetch_max_wait"),
    (AIOKafkaConsumer, "_coordinator", "aiokafka_privates.py: rejoin_request"),
    (GroupCoordinator, "request_rejoin", "aiokafka_privates.py: rejoin_request"),
    # the client, requests and record parser (recovery/reader.py, the recovery package's)
    (AIOKafkaClient, "bootstrap", "batch_reader.py"),
    (AIOKafkaClient, "send", "batch_reader.py"),
    (AIOKafkaClient, "add_topic", "batch_reader.py"),
    (AIOKafkaClient, "force_metadata_update", "batch_reader.py"),
    (AIOKafkaClient, "cluster", "batch_reader.py"),
    (AIOKafkaClient, "close", "batch_reader.py"),
    (ClusterMetadata, "leader_for_partition", "batch_reader.py"),
    (FetchRequest, "build", "batch_reader.py"),
    (OffsetRequest, "build", "batch_reader.py"),
    (MemoryRecords, "has_next", "batch_reader.py"),
    (MemoryRecords, "next_batch", "batch_reader.py"),
    (DefaultRecordBatch, "validate_crc", "batch_reader.py"),
    (DefaultRecordBatch, "next_offset", "batch_reader.py"),
    (DefaultRecordBatch, "base_offset", "batch_reader.py"),
    (DefaultRecordBatch, "producer_id", "batch_reader.py"),
    (DefaultRecordBatch, "is_control_batch", "batch_reader.py"),
    (DefaultRecordBatch, "is_transactional", "batch_reader.py"),
]
