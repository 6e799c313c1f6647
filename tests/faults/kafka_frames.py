"""The Kafka frames the fault proxy reads (tests/faults/proxy.py): size-prefixed requests and
their answers, matched by correlation id, and the transaction requests among them (``EndTxn``,
``InitProducerId``) with the fields the tests drive their timing by.

Layouts: https://kafka.apache.org/protocol (request header v1/v2, the flexible versions'
tagged fields)."""

from __future__ import annotations

import struct
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from app.eos.txn_messages import ProduceResponse_v12, TxnOffsetCommitResponse_v5

#: Kafka API keys the proxy reads (https://kafka.apache.org/protocol#protocol_api_keys).
PRODUCE, JOIN_GROUP, SYNC_GROUP, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, END_TXN = (
    0,
    11,
    14,
    22,
    24,
    26,
)
TXN_OFFSET_COMMIT = 28
#: The error code a coordinator answers while the transaction's markers are being written.
CONCURRENT_TRANSACTIONS = 51
#: First flexible version (compact strings, tagged fields) of each API read here.
FLEXIBLE_FROM = {INIT_PRODUCER_ID: 2, END_TXN: 3, PRODUCE: 9, TXN_OFFSET_COMMIT: 3}
#: The answers whose error codes the proxy can rewrite, by (API key, version): the versions
#: the transactions-v2 flow sends (app/eos/txn_messages.py).
REWRITABLE = {
    (PRODUCE, 12): ProduceResponse_v12,
    (TXN_OFFSET_COMMIT, 5): TxnOffsetCommitResponse_v5,
}


@dataclass
class TxnRequest:
    """An ``EndTxn`` or ``InitProducerId`` seen on a link."""

    api_key: int
    forwarded_at: float  # time.monotonic() when it was sent on to the broker; 0: never was
    producer_id: int = -1  # EndTxn: the request's; InitProducerId: the answer's
    epoch: int = -1
    committed: bool = False  # EndTxn: commit (True) or abort
    transactional_id: str = ""
    error: int | None = None  # the error code the client got (0: success); None: no answer seen
    action: str | None = None  # what ``Link.on_request`` did to it ("reset-before"...)
    broker_error: int | None = None  # the broker's own, when the proxy changed it ("concurrent")


@dataclass
class Frame:
    data: bytes
    api_key: int = -1
    version: int = -1
    correlation_id: int = -1
    txn: TxnRequest | None = None


class Reader:
    """Splits a byte stream into Kafka frames (4-byte size prefix)."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[bytes]:
        self.buf += data
        frames = []
        while len(self.buf) >= 4:
            size = struct.unpack_from(">i", self.buf)[0]
            if len(self.buf) < 4 + size:
                break
            frames.append(bytes(self.buf[: 4 + size]))
            del self.buf[: 4 + size]
        return frames

    def rest(self) -> bytes:
        out = bytes(self.buf)
        self.buf.clear()
        return out


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        byte = b[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, i
        shift += 7


def _string(b: bytes, i: int, flexible: bool) -> tuple[str, int]:
    if flexible:
        n, i = _uvarint(b, i)
        n -= 1
    else:
        n = struct.unpack_from(">h", b, i)[0]
        i += 2
    if n < 0:
        return "", i
    return b[i : i + n].decode(errors="replace"), i + n


def parse_request(frame: bytes) -> tuple[int, int, int, TxnRequest | None]:
    """(api key, version, correlation id, the transaction request it is, if one)."""
    api_key, version, corr = struct.unpack_from(">hhi", frame, 4)
    flexible = version >= FLEXIBLE_FROM.get(api_key, 1 << 15)
    if api_key not in (END_TXN, INIT_PRODUCER_ID):
        return api_key, version, corr, None
    i = 12
    client_len = struct.unpack_from(">h", frame, i)[0]
    i += 2 + max(client_len, 0)
    if flexible:
        n, i = _uvarint(frame, i)  # header tagged fields (none expected)
        assert n == 0, "tagged fields in a request header"
    txn = TxnRequest(api_key, 0.0)
    txn.transactional_id, i = _string(frame, i, flexible)
    if api_key == END_TXN:
        txn.producer_id, txn.epoch, committed = struct.unpack_from(">qhb", frame, i)
        txn.committed = bool(committed)
    return api_key, version, corr, txn


def parse_answer(frame: bytes, api_key: int, version: int, txn: TxnRequest) -> None:
    """Fill ``txn`` from its answer (error code; InitProducerId: producer id and epoch)."""
    i = 8  # size, correlation id
    if version >= FLEXIBLE_FROM.get(api_key, 1 << 15):
        _, i = _uvarint(frame, i)  # response header tagged fields
    _throttle, txn.error = struct.unpack_from(">ih", frame, i)
    if api_key == INIT_PRODUCER_ID:
        txn.producer_id, txn.epoch = struct.unpack_from(">qh", frame, i + 6)


def rewrite_end_txn_error(frame: bytes, version: int, error: int) -> bytes:
    """``frame`` (an EndTxn answer) with ``error`` and, from v5 on, the producer id and epoch a
    broker sends with an error (-1, -1), as if the coordinator had answered so."""
    i = 8
    if version >= FLEXIBLE_FROM[END_TXN]:
        _, i = _uvarint(frame, i)  # response header tagged fields
    out = bytearray(frame)
    struct.pack_into(">h", out, i + 4, error)  # after the throttle time
    if version >= 5:
        struct.pack_into(">qh", out, i + 6, -1, -1)
    return bytes(out)


def _answer_body_at(frame: bytes) -> int:
    """Where a flexible answer's body starts: after its size, correlation id and the response
    header's tagged fields (header v1)."""
    count, i = _uvarint(frame, 8)
    for _ in range(count):
        _tag, i = _uvarint(frame, i)
        size, i = _uvarint(frame, i)
        i += size
    return i


def _partition_errors(api_key: int, answer: Any) -> list[list[Any]]:
    """The partition entries of a decoded answer, as lists whose index 1 is the error code."""
    if api_key == PRODUCE:
        return [p for _t, parts, _ in answer.responses for p in parts]
    return [p for _t, parts, _ in answer.topics for p in parts]


def answer_errors(frame: bytes, api_key: int, version: int) -> list[int]:
    """The partition error codes of an answer the proxy can read (:data:`REWRITABLE`)."""
    kind = REWRITABLE[(api_key, version)]
    answer = kind.decode(BytesIO(frame[_answer_body_at(frame) :]))
    return [int(p[1]) for p in _partition_errors(api_key, answer)]


def rewrite_errors(frame: bytes, api_key: int, version: int, error: int) -> bytes:
    """``frame`` (an answer of :data:`REWRITABLE`) with every partition's error code set to
    ``error``, as if the broker had answered so."""
    kind = REWRITABLE[(api_key, version)]
    at = _answer_body_at(frame)
    answer = kind.decode(BytesIO(frame[at:]))
    if api_key == PRODUCE:
        # A failed partition has no offsets; tag 0 (the new leader, KIP-951, sent with
        # NOT_LEADER errors only) goes, which aiokafka's encoder cannot write either.
        answer.responses = [
            (name, [(p[0], error, -1, -1, -1, [], None, {}) for p in parts], tags)
            for name, parts, tags in answer.responses
        ]
        answer.tags = {k: v for k, v in answer.tags.items() if k > 0}
    else:
        answer.topics = [
            (name, [(p[0], error, p[2]) for p in parts], tags)
            for name, parts, tags in answer.topics
        ]
    body = frame[4:at] + answer.encode()
    return struct.pack(">i", len(body)) + body
