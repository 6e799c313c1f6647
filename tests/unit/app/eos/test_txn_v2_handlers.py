"""What the transaction v2 handlers (app/eos/txn_v2.py) do with each answer of the broker, on a
fake sender. The flow itself runs on a real broker in
tests/integration/test_transaction_protocol.py."""

from __future__ import annotations

from typing import Any

import pytest
from aiokafka.errors import ProducerFenced
from aiokafka.producer.transaction_manager import TransactionResult, TransactionState
from aiokafka.structs import TopicPartition

from app.eos.txn_v2 import (
    EndTxnV5Handler,
    InitPidV5Handler,
    ProduceV12Handler,
    TransactionAbortable,
    TransactionManagerV2,
    TxnOffsetCommitV5Handler,
)

# --- the handlers ----------------------------------------------------------------------------


class FakeSender:
    """What aiokafka's handlers read of their sender."""

    def __init__(self, txn: TransactionManagerV2) -> None:
        self._txn_manager = txn
        self._retry_backoff = 0.1
        self._acks = -1
        self._request_timeout_ms = 30000
        self.client = None
        self.dead: list[object] = []

    def _coordinator_dead(self, kind: object) -> None:
        self.dead.append(kind)


class FakeBatch:
    def __init__(self) -> None:
        self.outcome: tuple[str, Any] | None = None

    def get_data_buffer(self) -> bytes:
        return b"RECORDS"

    def done(self, offset: int, timestamp: int, log_start_offset: int | None) -> None:
        self.outcome = ("done", offset)

    def failure(self, exception: BaseException) -> None:
        self.outcome = ("failed", exception)


def open_transaction() -> TransactionManagerV2:
    txn = TransactionManagerV2("tid", 15000)
    txn.set_pid_and_epoch(42, 3)
    txn.begin_transaction()
    return txn


def fields(**kw: Any) -> Any:
    return type("Response", (), kw)()


async def test_end_txn_adopts_the_returned_epoch_and_resets_sequences() -> None:
    txn = open_transaction()
    tp = TopicPartition("out", 0)
    txn.maybe_add_partition_to_txn(tp)
    txn.increment_sequence_number(tp, 5)
    txn.committing_transaction()
    handler = EndTxnV5Handler(FakeSender(txn), TransactionResult.COMMIT)
    assert handler.create_request().fields == ("tid", 42, 3, True)
    resp = fields(error_code=0, producer_id=42, producer_epoch=4)
    assert handler.handle_response(resp) is None
    assert (txn.producer_id, txn.producer_epoch, txn.sequence_number(tp)) == (42, 4, 0)
    assert txn.state is TransactionState.READY
    assert txn.wait_for_transaction_end().result() is None


async def test_end_txn_with_a_new_producer_id_when_the_epoch_ran_out() -> None:
    txn = open_transaction()
    txn.committing_transaction()
    handler = EndTxnV5Handler(FakeSender(txn), TransactionResult.COMMIT)
    handler.handle_response(fields(error_code=0, producer_id=77, producer_epoch=0))
    assert (txn.producer_id, txn.producer_epoch) == (77, 0)


async def test_transaction_abortable_on_end_txn_fails_the_commit() -> None:
    txn = open_transaction()
    txn.committing_transaction()
    handler = EndTxnV5Handler(FakeSender(txn), TransactionResult.COMMIT)
    assert (
        handler.handle_response(fields(error_code=120, producer_id=-1, producer_epoch=-1)) is None
    )
    assert txn.state is TransactionState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortable):
        txn.wait_for_transaction_end().result()
    assert (txn.producer_id, txn.producer_epoch) == (42, 3)  # nothing adopted


async def test_end_txn_fenced_is_still_fenced() -> None:
    txn = open_transaction()
    txn.committing_transaction()
    handler = EndTxnV5Handler(FakeSender(txn), TransactionResult.COMMIT)
    with pytest.raises(ProducerFenced):
        handler.handle_response(fields(error_code=47, producer_id=-1, producer_epoch=-1))


async def test_transaction_abortable_on_produce_fails_that_batch_without_a_retry() -> None:
    txn = open_transaction()
    a, b = FakeBatch(), FakeBatch()
    batches = {TopicPartition("out", 0): a, TopicPartition("out", 1): b}
    handler = ProduceV12Handler(FakeSender(txn), batches)
    assert handler.create_request().fields[3] == [
        ("out", [(0, b"RECORDS", {}), (1, b"RECORDS", {})], {})
    ]
    partitions = [(0, 0, 100, -1, 0, [], None, {}), (1, 120, -1, -1, -1, [], "abort it", {})]
    handler.handle_response(fields(responses=[("out", partitions, {})]))
    assert a.outcome == ("done", 100)
    assert b.outcome is not None and b.outcome[0] == "failed"
    assert isinstance(b.outcome[1], TransactionAbortable)


async def test_transaction_abortable_on_txn_offset_commit_makes_the_transaction_abortable() -> None:
    txn = open_transaction()
    tp = TopicPartition("in", 0)
    fut = txn.add_offsets_to_txn({tp: fields(offset=10, metadata="")}, "grp")
    assert txn.consumer_group_to_add() is None  # no AddOffsetsToTxn
    assert txn.offsets_to_commit() is not None  # straight to TxnOffsetCommit
    assert not txn.is_empty_transaction()
    handler = TxnOffsetCommitV5Handler(FakeSender(txn), {tp: fields(offset=10, metadata="")}, "grp")
    assert handler.handle_response(fields(topics=[("in", [(0, 120, {})], {})])) is None
    assert txn.state is TransactionState.ABORTABLE_ERROR
    with pytest.raises(TransactionAbortable):
        fut.result()
    with pytest.raises(TransactionAbortable):
        txn.wait_for_transaction_end().result()


async def test_txn_offset_commit_success() -> None:
    txn = open_transaction()
    tp = TopicPartition("in", 0)
    offsets = {tp: fields(offset=10, metadata="")}
    fut = txn.add_offsets_to_txn(offsets, "grp")
    handler = TxnOffsetCommitV5Handler(FakeSender(txn), dict(offsets), "grp")
    assert handler.create_request().fields[:7] == ("tid", "grp", 42, 3, -1, "", None)
    assert handler.handle_response(fields(topics=[("in", [(0, 0, {})], {})])) is None
    assert fut.result() is None


async def test_a_record_adds_its_partition_locally_only() -> None:
    txn = open_transaction()
    tp = TopicPartition("out", 0)
    txn.maybe_add_partition_to_txn(tp)
    assert txn.partitions_to_add() == set()  # no AddPartitionsToTxn, the send is not muted
    assert tp in txn.txn_partitions
    assert txn.started


async def test_producer_fenced_is_fenced_on_every_v2_request() -> None:
    """PRODUCER_FENCED (90), which the newer versions answer instead of INVALID_PRODUCER_EPOCH,
    must read as fenced: an unknown error would make the task start a new producer and fence
    the partition's new owner in turn."""
    txn = open_transaction()
    txn.committing_transaction()
    with pytest.raises(ProducerFenced):
        EndTxnV5Handler(FakeSender(txn), TransactionResult.COMMIT).handle_response(
            fields(error_code=90, producer_id=-1, producer_epoch=-1)
        )
    txn = open_transaction()
    tp = TopicPartition("in", 0)
    txn.add_offsets_to_txn({tp: fields(offset=10, metadata="")}, "grp")
    handler = TxnOffsetCommitV5Handler(FakeSender(txn), {tp: fields(offset=10, metadata="")}, "grp")
    with pytest.raises(ProducerFenced):
        handler.handle_response(fields(topics=[("in", [(0, 90, {})], {})]))
    batch = FakeBatch()
    produce = ProduceV12Handler(FakeSender(open_transaction()), {TopicPartition("out", 0): batch})
    produce.handle_response(fields(responses=[("out", [(0, 90, -1, -1, -1, [], None, {})], {})]))
    assert batch.outcome is not None and isinstance(batch.outcome[1], ProducerFenced)
    with pytest.raises(ProducerFenced):
        InitPidV5Handler(FakeSender(TransactionManagerV2("tid", 15000))).handle_response(
            fields(error_code=90, producer_id=-1, producer_epoch=-1)
        )


async def test_a_produce_meeting_the_previous_transaction_still_completing_is_retried() -> None:
    """CONCURRENT_TRANSACTIONS on a Produce v12 (the broker's partition verification while the
    last EndTxn's markers are written) failed the integration test's next transaction in CI;
    the Java client retries it, as aiokafka retries what older versions get for it."""
    txn = open_transaction()
    batch = FakeBatch()
    handler = ProduceV12Handler(FakeSender(txn), {TopicPartition("out", 0): batch})
    handler.handle_response(
        fields(responses=[("out", [(0, 51, -1, -1, -1, [], "concurrent", {})], {})])
    )
    assert batch.outcome is None
    assert handler._to_reenqueue == [batch]
