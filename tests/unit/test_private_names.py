"""Every private (or undocumented) name of Faust, mode and aiokafka that the worker relies on,
checked against the installed versions: a version bump that renames one fails here in seconds,
not in the fault tier. When one fails, the comment beside it says which of our modules uses
it; fix that module (``app/eos/producer.py``, ``app/eos/consumer.py`` hold nearly all of
aiokafka's; ``app/eos/txn_v2.py`` the sender and transaction state of the transactions v2 flow;
``recovery/reader.py`` the Fetch requests and record batches), then this list. Faust's list is
the Faust adapter's (``recovery/faust_adapter.py``, ``FAUST_PRIVATES``), with the files that
name each member: a file not listed there that names one of the recovery's fails here too."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
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
from aiokafka.producer.transaction_manager import TransactionManager as AIOTxnManager
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.default_records import DefaultRecordBatch
from aiokafka.record.memory_records import MemoryRecords
from faust.tables.recovery import Recovery

from recovery.faust_adapter import FAUST_PRIVATES

REPO = Path(__file__).resolve().parents[2]


def defines(cls: type, name: str) -> bool:
    """``cls`` (or a base) has ``name`` as a class attribute, or assigns ``self.<name>``."""
    if hasattr(cls, name):
        return True
    pattern = re.compile(rf"self\.{re.escape(name)}\b\s*(:[^=\n]*)?=")
    for klass in inspect.getmro(cls):
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if pattern.search(source):
            return True
    return False


USED: list[tuple[type, str, str]] = [
    # aiokafka's producer (app/eos/producer.py: send_lingering, is_fenced, force_close)
    (AIOKafkaProducer, "_message_accumulator", "producer.py"),
    (AIOKafkaProducer, "_txn_manager", "producer.py"),
    (AIOKafkaProducer, "_sender", "producer.py"),
    (AIOKafkaProducer, "client", "producer.py"),
    (AIOKafkaProducer, "create_batch", "collector.py"),
    (AIOKafkaProducer, "send_batch", "collector.py"),
    (MessageAccumulator, "flush_for_commit", "producer.py"),
    (MessageAccumulator, "_batches", "producer.py"),
    (MessageAccumulator, "_pending_batches", "producer.py"),
    (MessageAccumulator, "fail_all", "producer.py"),
    (MessageBatch, "future", "producer.py"),
    (MessageBatch, "_drain_waiter", "producer.py"),
    (MessageBatch, "_msg_futures", "producer.py"),
    (AIOTxnManager, "is_fatal_error", "producer.py"),
    (AIOTxnManager, "wait_for_transaction_end", "producer.py"),
    (
        AIOTxnManager,
        "maybe_add_partition_to_txn",
        "producer.py: probe_transactional_writes, commit_markers",
    ),
    (Sender, "close", "producer.py"),
    # aiokafka's sender and transaction state, subclassed for transactions v2 (txn_v2.py)
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
    (AIOTxnManager, "_txn_partitions", "txn_v2.py: TransactionManagerV2"),
    (AIOTxnManager, "_pending_txn_partitions", "txn_v2.py: add_partition_by_request"),
    (AIOTxnManager, "_txn_consumer_group", "txn_v2.py: add_offsets_to_txn"),
    (AIOTxnManager, "_pid_and_epoch", "txn_v2.py: adopt"),
    (AIOTxnManager, "_sequence_numbers", "txn_v2.py: adopt"),
    (AIOTxnManager, "notify_task_waiter", "txn_v2.py: add_partition_by_request"),
    (AIOTxnManager, "error_transaction", "txn_v2.py: TRANSACTION_ABORTABLE"),
    (AIOTxnManager, "complete_transaction", "txn_v2.py: EndTxnV5Handler"),
    (AIOTxnManager, "is_empty_transaction", "txn_v2.py: SenderV2._do_txn_commit"),
    (AIOTxnManager, "add_offsets_to_txn", "txn_v2.py: TransactionManagerV2"),
    (AIOTxnManager, "producer_id", "producer.py: producer_id_and_epoch"),
    (AIOTxnManager, "producer_epoch", "producer.py: producer_id_and_epoch"),
    # aiokafka's consumer (app/eos/consumer.py, app/eos/manager.py: _request_rejoin)
    (AIOKafkaConsumer, "_fetch_max_wait_ms", "consumer.py"),
    (AIOKafkaConsumer, "_coordinator", "manager.py"),
    (GroupCoordinator, "request_rejoin", "manager.py"),
    # aiokafka's client, requests and record parser (recovery/reader.py)
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
    # Faust's (recovery/faust_adapter.py and the files it lists)
    *((cls, name, where) for cls, name, where in FAUST_PRIVATES),
]


@pytest.mark.parametrize(
    ("cls", "name", "used_in"), USED, ids=[f"{c.__name__}.{n}" for c, n, _ in USED]
)
def test_a_name_the_worker_relies_on_still_exists(cls: type, name: str, used_in: str) -> None:
    assert defines(cls, name), (
        f"{cls.__module__}.{cls.__qualname__}.{name} is gone (used in {used_in})"
    )


def test_the_check_finds_a_missing_name() -> None:
    assert not defines(Recovery, "_no_such_attribute")
    assert defines(Recovery, "_processing_times")  # assigned in __init__, no class attribute


def files_naming(name: str) -> set[str]:
    """The repository's Python files (but the tests) that name ``name`` as an attribute."""
    pattern = re.compile(rf"\.{re.escape(name)}\b|def {re.escape(name)}\b")
    found = set()
    for package in ("app", "recovery", "tables", "scripts", "bench", "spark", "ingest"):
        for path in (REPO / package).rglob("*.py"):
            if pattern.search(path.read_text()):
                found.add(str(path.relative_to(REPO)))
    return found


RECOVERY_PRIVATES = sorted(
    {name for _, name, where in FAUST_PRIVATES if "recovery/" in where and name.startswith("_")}
)


@pytest.mark.parametrize("name", RECOVERY_PRIVATES)
def test_the_recoverys_faust_privates_are_named_only_where_the_adapter_says(name: str) -> None:
    allowed = {f.strip() for _, n, where in FAUST_PRIVATES if n == name for f in where.split(",")}
    assert files_naming(name) <= allowed, f"Faust's {name} named outside {sorted(allowed)}"
    assert "recovery/faust_adapter.py" in files_naming(name)
