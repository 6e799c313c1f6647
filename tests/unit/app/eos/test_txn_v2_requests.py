"""The transaction v2 requests (app/eos/txn_messages.py) against bytes written out here from
Kafka's schemas (InitProducerId v5, EndTxn v5, TxnOffsetCommit v5, Produce v12: flexible, so
compact strings and arrays and a tagged-field section after each structure; request header v2,
response header v1). The flow itself runs on a real broker in
tests/integration/test_transaction_protocol.py."""

from __future__ import annotations

import struct
from io import BytesIO
from typing import Any

from aiokafka.producer.transaction_manager import TransactionResult
from aiokafka.structs import TopicPartition

from app.eos.txn_messages import EndTxnV5, InitProducerIdV5, ProduceV12, TxnOffsetCommitV5

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
