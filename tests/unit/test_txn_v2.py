"""The transaction v2 requests (app/eos/txn_messages.py) against bytes written out here from
Kafka's schemas (InitProducerId v5, EndTxn v5, TxnOffsetCommit v5, Produce v12: flexible, so
compact strings and arrays and a tagged-field section after each structure; request header v2,
response header v1), and what the v2 handlers (app/eos/txn_v2.py) do with each answer. The
flow itself runs on a real broker in tests/integration/test_transaction_protocol.py."""

from __future__ import annotations

import struct
from io import BytesIO
from typing import Any

import pytest
from aiokafka.errors import ProducerFenced
from aiokafka.producer.transaction_manager import TransactionResult, TransactionState
from aiokafka.structs import TopicPartition

from app.eos.txn_messages import EndTxnV5, InitProducerIdV5, ProduceV12, TxnOffsetCommitV5
from app.eos.txn_v2 import (
    EndTxnV5Handler,
    InitPidV5Handler,
    ProduceV12Handler,
    TransactionAbortable,
    TransactionManagerV2,
    TxnOffsetCommitV5Handler,
)

VERSIONS = {0: (0, 13), 22: (0, 6), 26: (0, 5), 28: (0, 5)}


def s(text: str | None) -> bytes:
    """A compact (nullable) string."""
    if text is None:
        return b"\x00"
    data = text.encode()
    return bytes([len(data) + 1]) + data


def prepared(request: Any) -> Any:
    return request.prepare(VERSIONS)


def header_v2(api_key: int, version: int) -> bytes:
    return struct.pack(">hhih", api_key, version, 7, 1) + b"c" + b"\x00"


def decode(request: Any, body: bytes) -> Any:
    """As aiokafka's connection reads a response frame: header v1 (id, no tags), then body."""
    buffer = BytesIO(struct.pack(">i", 7) + b"\x00" + body)
    assert request.parse_response_header(buffer).correlation_id == 7
    response = request.RESPONSE_TYPE.decode(buffer)
    assert buffer.read() == b""
    return response


def test_init_producer_id_v5() -> None:
    request = prepared(InitProducerIdV5("tid", 15000))
    assert request.build_request_header(7, "c").encode() == header_v2(22, 5)
    assert request.encode() == s("tid") + struct.pack(">iqh", 15000, -1, -1) + b"\x00"
    response = decode(request, struct.pack(">ihqh", 0, 0, 42, 3) + b"\x00")
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 42, 3)


def test_end_txn_v5() -> None:
    request = prepared(EndTxnV5("tid", 42, 3, TransactionResult.COMMIT))
    assert request.build_request_header(7, "c").encode() == header_v2(26, 5)
    assert request.encode() == s("tid") + struct.pack(">qh?", 42, 3, True) + b"\x00"
    assert prepared(EndTxnV5("tid", 42, 3, TransactionResult.ABORT)).encode().endswith(b"\x00\x00")
    response = decode(request, struct.pack(">ihqh", 0, 0, 42, 4) + b"\x00")
    assert (response.error_code, response.producer_id, response.producer_epoch) == (0, 42, 4)


def test_txn_offset_commit_v5() -> None:
    offsets = {TopicPartition("in", 1): (11, ""), TopicPartition("in", 0): (10, None)}
    request = prepared(TxnOffsetCommitV5("tid", "grp", 42, 3, offsets))
    assert request.build_request_header(7, "c").encode() == header_v2(28, 5)
    partition = struct.Struct(">iqi")
    assert request.encode() == (
        s("tid")
        + s("grp")
        + struct.pack(">qhi", 42, 3, -1)  # producer id, epoch, generation -1
        + s("")  # member id
        + s(None)  # group instance id
        + b"\x02"  # one topic
        + s("in")
        + b"\x03"  # two partitions, in order
        + partition.pack(0, 10, -1)
        + s(None)
        + b"\x00"
        + partition.pack(1, 11, -1)
        + s("")
        + b"\x00"
        + b"\x00"  # the topic's tags
        + b"\x00"  # the request's tags
    )
    body = struct.pack(">i", 0) + b"\x02" + s("in") + b"\x02" + struct.pack(">ih", 0, 120)
    response = decode(request, body + b"\x00" + b"\x00" + b"\x00")
    assert response.topics == [("in", [(0, 120, {})], {})]


def test_produce_v12() -> None:
    request = prepared(ProduceV12("tid", -1, 30000, {"out": [(3, b"RECORDS")]}))
    assert request.build_request_header(7, "c").encode() == header_v2(0, 12)
    assert request.encode() == (
        s("tid")
        + struct.pack(">hi", -1, 30000)
        + b"\x02"
        + s("out")
        + b"\x02"
        + struct.pack(">i", 3)
        + b"\x08RECORDS"  # compact bytes
        + b"\x00"
        + b"\x00"
        + b"\x00"
    )
    leader = struct.pack(">ii", 1, 5) + b"\x00"  # CurrentLeader (tag 0): id, epoch, tags
    partition = struct.pack(">ihqqq", 3, 0, 100, -1, 0) + b"\x01" + s(None)
    partition += b"\x01" + bytes([0, len(leader)]) + leader
    body = b"\x02" + s("out") + b"\x02" + partition + b"\x00" + struct.pack(">i", 0) + b"\x00"
    response = decode(request, body)
    [(topic, [p], _)] = response.responses
    assert topic == "out"
    assert p[:7] == (3, 0, 100, -1, 0, [], None)
    assert p[7] == {0: leader}


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


async def test_transaction_abortable_on_produce_fails_only_that_batch() -> None:
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
    other = TopicPartition("out", 1)
    txn.add_partition_by_request(other)  # a marker-only transaction (hanging.py)
    assert txn.partitions_to_add() == {other}


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
