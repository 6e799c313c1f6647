"""Table-driven tests of the pure de-duplication rules in ``app/rules.py``."""

from __future__ import annotations

import json
import struct
from datetime import UTC, datetime

import pytest

from app import rules
from app.rules import BadInput, Invalid, Valid
from tables import window

MAX_EVENT = 1024
MAX_ID = 8


def check(value: bytes | None, *, max_event: int = MAX_EVENT, max_id: int = MAX_ID):
    return rules.inspect(value, max_event_bytes=max_event, max_id_bytes=max_id)


def event_of_size(size: int, message_id: str = "abc") -> bytes:
    """A valid JSON event of exactly ``size`` bytes (padding in a ``pad`` field)."""
    head = json.dumps({"messageId": message_id, "pad": ""}, separators=(",", ":")).encode()
    pad = size - len(head)
    assert pad >= 0
    value = head[:-2] + b"x" * pad + b'"}'
    assert len(value) == size
    return value


def doc(message_id: object) -> bytes:
    return json.dumps({"messageId": message_id, "type": "track"}).encode()


# --- inspect: bad input ----------------------------------------------------------------------

BAD_INPUT = [
    pytest.param(None, BadInput.NULL_VALUE, id="tombstone"),
    pytest.param(event_of_size(MAX_EVENT + 1), BadInput.TOO_LARGE, id="limit+1-bytes"),
    pytest.param(b"\xff\xfe", BadInput.NOT_UTF8, id="invalid-utf8"),
    pytest.param(b'{"messageId":"a\xc3"}', BadInput.NOT_UTF8, id="truncated-utf8-seq"),
    pytest.param(b"", BadInput.NOT_JSON, id="empty-bytes"),
    pytest.param(b"not json", BadInput.NOT_JSON, id="plain-text"),
    pytest.param(b'{"messageId": "abc"', BadInput.NOT_JSON, id="truncated-object"),
    pytest.param(b"\xef\xbb\xbf" + doc("abc"), BadInput.NOT_JSON, id="utf8-bom"),
    pytest.param(b'[{"messageId": "abc"}]', BadInput.NOT_OBJECT, id="json-array"),
    pytest.param(b'"abc"', BadInput.NOT_OBJECT, id="json-string"),
    pytest.param(b"42", BadInput.NOT_OBJECT, id="json-number"),
    pytest.param(b"null", BadInput.NOT_OBJECT, id="json-null"),
    pytest.param(b"true", BadInput.NOT_OBJECT, id="json-bool"),
    pytest.param(b"{}", BadInput.NO_MESSAGE_ID, id="empty-object"),
    pytest.param(b'{"messageid": "abc"}', BadInput.NO_MESSAGE_ID, id="wrong-case"),
    pytest.param(b'{"message_id": "abc"}', BadInput.NO_MESSAGE_ID, id="snake-case"),
    pytest.param(
        b'{"properties": {"messageId": "abc"}}', BadInput.NO_MESSAGE_ID, id="only-nested-id"
    ),
    pytest.param(doc(123), BadInput.MESSAGE_ID_NOT_STRING, id="id-int"),
    pytest.param(doc(1.5), BadInput.MESSAGE_ID_NOT_STRING, id="id-float"),
    pytest.param(doc(True), BadInput.MESSAGE_ID_NOT_STRING, id="id-bool"),
    pytest.param(doc(None), BadInput.MESSAGE_ID_NOT_STRING, id="id-null"),
    pytest.param(doc(["abc"]), BadInput.MESSAGE_ID_NOT_STRING, id="id-list"),
    pytest.param(doc({"id": "abc"}), BadInput.MESSAGE_ID_NOT_STRING, id="id-dict"),
    pytest.param(doc(""), BadInput.EMPTY_MESSAGE_ID, id="id-empty"),
    pytest.param(doc("a" * (MAX_ID + 1)), BadInput.MESSAGE_ID_TOO_LONG, id="id-ascii-limit+1"),
    # 5 characters, 9 bytes: a limit counted in characters would accept it.
    pytest.param(doc("é" * 4 + "a"), BadInput.MESSAGE_ID_TOO_LONG, id="id-2byte-chars-limit+1"),
    # 3 characters, 9 bytes.
    pytest.param(doc("😀😀a"), BadInput.MESSAGE_ID_TOO_LONG, id="id-4byte-chars-limit+1"),
    # 3 characters, 9 bytes.
    pytest.param(doc("€€€"), BadInput.MESSAGE_ID_TOO_LONG, id="id-3byte-chars-limit+1"),
    # JSON escape of a lone surrogate: valid JSON, valid UTF-8 bytes, not encodable as UTF-8.
    pytest.param(b'{"messageId": "\\ud800"}', BadInput.NOT_UTF8, id="id-lone-surrogate"),
    pytest.param(b'{"messageId": "a\\udfffb"}', BadInput.NOT_UTF8, id="id-lone-low-surrogate"),
]


@pytest.mark.parametrize(("value", "reason"), BAD_INPUT)
def test_inspect_rejects_bad_input(value: bytes | None, reason: BadInput) -> None:
    result = check(value)
    assert isinstance(result, Invalid), result
    assert result.reason is reason
    assert isinstance(result.detail, str)
    assert result.detail


@pytest.mark.parametrize(
    ("value", "detail_contains"),
    [
        pytest.param(None, "tombstone", id="null"),
        pytest.param(event_of_size(MAX_EVENT + 1), f"{MAX_EVENT + 1} bytes", id="size"),
        pytest.param(event_of_size(MAX_EVENT + 1), f"limit {MAX_EVENT}", id="limit"),
        pytest.param(b'{"messageId":"\xff"}', "byte 14", id="utf8-position"),
        pytest.param(b"[1]", "list", id="array-type"),
        pytest.param(doc(7), "int", id="id-type"),
        pytest.param(doc("é" * 5), "10 bytes", id="id-size-in-bytes"),
    ],
)
def test_inspect_detail_explains(value: bytes | None, detail_contains: str) -> None:
    result = check(value)
    assert isinstance(result, Invalid)
    assert detail_contains in result.detail


def test_inspect_not_json_detail_is_bounded() -> None:
    result = check(b"{" + b'"k": 1, ' * 100 + b"oops", max_event=10_000)
    assert isinstance(result, Invalid)
    assert result.reason is BadInput.NOT_JSON
    assert len(result.detail) <= 200


@pytest.mark.parametrize(
    "value",
    [b"[" * 5000, b'{"a":' * 3000, b"[" * 5000 + b"]" * 5000],
    ids=["array", "object", "balanced-array"],
)
def test_inspect_deeply_nested_json_is_dead_lettered(value: bytes) -> None:
    """json.loads raises RecursionError (not ValueError) on deep nesting well under
    max_event_bytes; inspect dead-letters it as not_json instead of crashing the agent."""
    result = check(value, max_event=32 * 1024)
    assert isinstance(result, Invalid)
    assert result.reason is BadInput.NOT_JSON
    assert "nested too deeply" in result.detail


# --- inspect: orjson's verdict is the standard library's --------------------------------------

#: Values where orjson and ``json`` part ways (refuse what the other takes, or parse a field
#: into another type) or that test the verdict's fields.
PARSER_EDGES = [
    b'{"messageId":"a","messageId":"b"}',  # duplicate keys: the last wins in both
    b'{"messageId":"b","timestamp":"2024-01-01T00:00:00Z","timestamp":"x"}',
    b'{"messageId":"\\ud800"}',  # lone surrogate escape: orjson refuses, json parses
    b'{"messageId":"ok","note":"\\udfff"}',  # ... in another field: json accepts the event
    b'{"messageId":"a","n":NaN}',
    b'{"messageId":"a","n":-Infinity}',
    b'{"messageId":"a","f":1e400}',  # beyond a double: orjson refuses, json gives inf
    b'{"messageId":"a","n":123456789012345678901234567890}',  # orjson: a float, json: an int
    b'{"messageId":"a","n":' + b"9" * 500 + b"}",  # orjson: infinity, refused; json: an int
    b'{"messageId":"a","n":' + b"9" * 5000 + b"}",  # json: over its digit limit
    b'{"messageId":123456789012345678901234567890}',  # detail names json's type (int)
    b"123456789012345678901234567890",
    b'\xef\xbb\xbf{"messageId":"a"}',  # a byte-order mark
    b'{"messageId":"a\x00"}',  # a raw control character
    b'{"messageId":"\\u0000"}',
    b'{"messageId":"\xed\xa0\x80"}',  # a surrogate encoded in UTF-8 bytes
    b'{"messageId":"\xff"}',
    b'{"messageId":"a"}x',
    b'{"messageId":"a",}',
    b'{"messageId":"a","x":' + b"[" * 900 + b"]" * 900 + b"}",
    b"[" * 1024 + b"]" * 1024,
    b'"messageId"',
    b"null",
    b"",
]


@pytest.mark.parametrize("value", PARSER_EDGES)
def test_inspect_gives_the_standard_librarys_verdict(value: bytes) -> None:
    assert check(value, max_event=32 * 1024) == rules._inspect_stdlib(value, MAX_ID)


@pytest.mark.parametrize("depth", [995, 1010, 1023])
def test_inspect_nesting_verdict_does_not_depend_on_the_stack(depth: int) -> None:
    """json refuses these or not depending on how deep the caller's stack is; orjson's limit
    (1,023 levels) is fixed, so a replay decides as the first run did."""
    value = b'{"messageId":"a","x":' + b"[" * depth + b"]" * depth + b"}"

    def nested(levels: int) -> Valid | Invalid:
        return check(value, max_event=32 * 1024) if levels == 0 else nested(levels - 1)

    assert nested(0) == nested(200) == Valid("a", b"a", None)


# --- inspect: valid input --------------------------------------------------------------------

SEGMENT_EVENT = {
    "messageId": "ajs-next-0f8b4cdd2c3c4a5f9e1d2b3c4d5e6f70",
    "type": "track",
    "event": "Order Completed",
    "userId": "u-42",
    "anonymousId": "6f1a0c3e-4b2d-4e5f-8a9b-0c1d2e3f4a5b",
    "timestamp": "2024-05-01T12:00:00.000Z",
    "properties": {
        "orderId": "o-1",
        "revenue": 12.5,
        "products": [{"id": "p1", "messageId": "not-this-one"}, {"id": "p2"}],
        "nested": {"deeper": {"messageId": 1}},
    },
    "context": {"library": {"name": "analytics.js", "version": "2.11.1"}, "locale": "en-US"},
}

VALID_INPUT = [
    pytest.param(
        doc("6f1a0c3e-4b2d-4e5f-8a9b-0c1d2e3f4a5b"),
        "6f1a0c3e-4b2d-4e5f-8a9b-0c1d2e3f4a5b",
        64,
        id="uuid",
    ),
    pytest.param(
        doc("ajs-" + "0123456789abcdef" * 2), "ajs-" + "0123456789abcdef" * 2, 64, id="ajs-32hex"
    ),
    pytest.param(
        json.dumps(SEGMENT_EVENT).encode(), SEGMENT_EVENT["messageId"], 256, id="segment-nested"
    ),
    pytest.param(doc("a" * MAX_ID), "a" * MAX_ID, MAX_ID, id="id-ascii-at-limit"),
    pytest.param(doc("é" * 4), "é" * 4, MAX_ID, id="id-2byte-at-limit"),
    pytest.param(doc("😀😀"), "😀😀", MAX_ID, id="id-4byte-at-limit"),
    pytest.param(doc("€€a"), "€€a", MAX_ID, id="id-3byte-under-limit"),
    pytest.param(b'{"messageId": "\\u00e9t\\u00e9"}', "été", MAX_ID, id="json-unicode-escapes"),
    pytest.param(b'{"messageId": "\\ud83d\\ude00"}', "😀", MAX_ID, id="json-surrogate-pair-escape"),
    pytest.param(b' \n{"messageId":"x"}\n ', "x", MAX_ID, id="surrounding-whitespace"),
    pytest.param(event_of_size(MAX_EVENT, "abc"), "abc", MAX_ID, id="value-exactly-at-limit"),
]


@pytest.mark.parametrize(("value", "message_id", "max_id"), VALID_INPUT)
def test_inspect_accepts_valid_input(value: bytes, message_id: str, max_id: int) -> None:
    result = check(value, max_id=max_id)
    assert isinstance(result, Valid)
    assert (result.message_id, result.id_bytes) == (message_id, message_id.encode("utf-8"))
    assert result.event_timestamp == json.loads(value).get("timestamp")


@pytest.mark.parametrize(
    ("size", "max_event", "ok"),
    [
        (100, 100, True),
        (101, 100, False),
        (99, 100, True),
        (MAX_EVENT, MAX_EVENT, True),
        (MAX_EVENT + 1, MAX_EVENT, False),
    ],
)
def test_inspect_size_limit_is_inclusive(size: int, max_event: int, ok: bool) -> None:
    result = check(event_of_size(size), max_event=max_event)
    assert isinstance(result, Valid) is ok
    if not ok:
        assert result.reason is BadInput.TOO_LARGE


def test_inspect_size_is_checked_before_parsing() -> None:
    # Garbage that is too large is reported as too large, not as not_json / not_utf8.
    result = check(b"\xff" * (MAX_EVENT + 1))
    assert isinstance(result, Invalid)
    assert result.reason is BadInput.TOO_LARGE


# --- partition_for: Kafka's Java murmur2 default partitioner --------------------------------


def java_murmur2(data: bytes) -> int:
    """Independent port of ``org.apache.kafka.common.utils.Utils.murmur2`` (signed 32-bit)."""
    mask = 0xFFFFFFFF
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    length = len(data)
    h = (seed ^ length) & mask
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


#: From apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
#: (testMurmur2): signed Java int results of Utils.murmur2.
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

PARTITION_COUNTS = [1, 3, 8, 12]


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS)
def test_reference_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    # Guards the reference implementation the other partition tests rely on.
    assert java_murmur2(key) == expected


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
@pytest.mark.parametrize(("key", "java_hash"), KAFKA_MURMUR2_VECTORS)
def test_partition_for_kafka_vectors(key: bytes, java_hash: int, partitions: int) -> None:
    # Java: Utils.toPositive(hash) % n, toPositive(x) = x & 0x7fffffff (not abs()).
    assert rules.partition_for(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        # toPositive(-973932308) = 1173551340; abs() would give 973932308 -> 2 (mod 3).
        (b"21", 3, 1173551340 % 3),
        (b"21", 12, 1173551340 % 12),
        (b"abc", 8, 479470107 % 8),
        (b"foobar", 12, (2**31 - 790332482) % 12),
    ],
)
def test_partition_for_hard_coded(key: bytes, partitions: int, expected: int) -> None:
    assert rules.partition_for(key, partitions) == expected


REFERENCE_KEYS = [
    b"a",
    b"ab",
    b"abc",
    b"abcd",
    b"abcde",
    b"6f1a0c3e-4b2d-4e5f-8a9b-0c1d2e3f4a5b",
    b"ajs-0123456789abcdef0123456789abcdef",
    "été-😀".encode(),
    b"\x00\x01\x02\xff\xfe\x80",
    bytes(range(256)),
]


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
@pytest.mark.parametrize("key", REFERENCE_KEYS)
def test_partition_for_matches_reference(key: bytes, partitions: int) -> None:
    got = rules.partition_for(key, partitions)
    assert got == java_partition(key, partitions)
    assert 0 <= got < partitions


def test_partition_for_spreads_keys() -> None:
    # A constant or truncated hash would put these in few partitions.
    ids = [f"id-{i}".encode() for i in range(400)]
    used = {rules.partition_for(i, 12) for i in ids}
    assert used == set(range(12))
    assert [rules.partition_for(i, 12) for i in ids] == [java_partition(i, 12) for i in ids]


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_partitions_for_a_batch_matches_one_by_one(partitions: int) -> None:
    # Every length from 0 to 41 bytes, each often enough to take the array path (>= 8 keys),
    # plus lengths seen once (the scalar path), shuffled so groups interleave.
    keys = [
        f"{n}-".encode().ljust(length, b"x")[:length] for n in range(12) for length in range(42)
    ]
    keys += REFERENCE_KEYS + [bytes(range(256))[:n] for n in (5, 77, 255)]
    keys = keys[::7] + keys[1::7] + keys[2::7] + keys[3::7] + keys[4::7] + keys[5::7] + keys[6::7]
    assert rules.partitions_for(keys, partitions) == [java_partition(k, partitions) for k in keys]
    assert rules.murmur2_many(keys) == [rules.murmur2(k) for k in keys]
    assert rules.partitions_for([], partitions) == []


# --- misplaced: not keyed and placed by its messageId ------------------------------------------

EVENT = Valid("6f1a0c3e-4b2d-4e5f-8a9b", b"6f1a0c3e-4b2d-4e5f-8a9b")
HOME = java_partition(EVENT.id_bytes, 8)
AWAY = (HOME + 1) % 8


@pytest.mark.parametrize(
    ("key", "partition", "expected"),
    [
        pytest.param(EVENT.id_bytes, HOME, False, id="keyed-and-placed"),
        pytest.param(None, HOME, True, id="null-key"),
        pytest.param(b"other", HOME, True, id="other-key-right-partition"),
        pytest.param(b"", HOME, True, id="empty-key"),
        pytest.param(EVENT.id_bytes + b" ", HOME, True, id="key-with-suffix"),
        pytest.param(EVENT.id_bytes.upper(), HOME, True, id="key-other-case"),
        pytest.param(EVENT.id_bytes, AWAY, True, id="right-key-wrong-partition"),
        pytest.param(None, AWAY, True, id="null-key-wrong-partition"),
    ],
)
def test_misplaced(key: bytes | None, partition: int, expected: bool) -> None:
    assert rules.misplaced(key, partition, EVENT.id_bytes, 8) is expected
    key_partition = rules.partitions_for([key or b""], 8)[0]
    assert rules.misplaced(key, partition, EVENT.id_bytes, 8, key_partition) is expected


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_misplaced_uses_partition_count(partitions: int) -> None:
    home = java_partition(EVENT.id_bytes, partitions)
    assert rules.misplaced(EVENT.id_bytes, home, EVENT.id_bytes, partitions) is False
    for other in range(partitions):
        if other != home:
            assert rules.misplaced(EVENT.id_bytes, other, EVENT.id_bytes, partitions) is True


# --- first sighting and the window ------------------------------------------------------------

W = 60_000  # a 60 s window for the tables below


@pytest.mark.parametrize(
    ("entry", "encoded"),
    [
        (window.Entry(0, 0), b"\x00" * 20),
        (
            window.Entry(1, 2, 3),
            b"\x00" * 7 + b"\x01" + b"\x00" * 7 + b"\x02" + b"\x00" * 3 + b"\x03",
        ),
        (
            window.Entry(1_714_564_800_000, 2**63),
            (1_714_564_800_000).to_bytes(8, "big") + b"\x80" + b"\x00" * 11,
        ),
    ],
)
def test_entry_round_trip(entry: window.Entry, encoded: bytes) -> None:
    assert entry.encode() == encoded
    assert window.Entry.decode(encoded) == entry


def test_a_repeat_counts_without_moving_the_first_sighting() -> None:
    entry = window.Entry(1_000, 7)
    assert entry.repeated().repeated() == window.Entry(1_000, 7, 2)
    assert window.Entry.decode(entry.encode()[:16]) == entry  # 16-byte entries read as 0 repeats


@pytest.mark.parametrize(
    ("held_ms", "record_ms", "duplicate"),
    [
        (None, 5, False),  # never seen
        (1_000, 1_000, True),  # immediate retry
        (1_000, 1_000 + W // 2, True),
        (1_000, 1_000 + W - 1, True),  # last ms inside the window
        (1_000, 1_000 + W, False),  # W itself is outside: forwarded, a new first sighting
        (1_000, 1_000 + W + 1, False),
        (1_000, 0, True),  # a copy older than the first sighting (out of order) is a repeat
    ],
)
def test_a_repeat_is_within_the_window(
    held_ms: int | None, record_ms: int, duplicate: bool
) -> None:
    held = None if held_ms is None else window.Entry(held_ms, 7)
    assert (window.judge(held, record_ms, W) is not window.Verdict.FIRST) is duplicate


@pytest.mark.parametrize(
    ("t", "bucket", "start"),
    [(0, 1000, 0), (999, 1000, 0), (1000, 1000, 1000), (3_600_001, 3_600_000, 3_600_000)],
)
def test_bucket_start(t: int, bucket: int, start: int) -> None:
    assert window.bucket_start(t, bucket) == start


def test_index_keys_order_by_bucket_then_sequence() -> None:
    keys = [
        window.index_key(5_000, 1_000, 9),
        window.index_key(5_999, 1_000, 3),  # same bucket, earlier sequence
        window.index_key(1_000, 1_000, 100),  # older bucket, later sequence
        window.index_key(9_000, 1_000, 0),
    ]
    assert sorted(keys) == [keys[2], keys[1], keys[0], keys[3]]
    assert window.bucket_of_index_key(keys[1]) == 5_000


@pytest.mark.parametrize(
    "entry",
    [
        window.Entry(0, 0),
        window.Entry(5_999, 3, 2),
        window.Entry(1_790_000_123_456, 2**40 + 7, 0xFFFFFFFF),
        window.Entry(2**62, 2**63 - 1),
    ],
)
@pytest.mark.parametrize("bucket_ms", [1, 1_000, 3_600_000])
def test_index_key_cut_from_an_encoded_entry(entry: window.Entry, bucket_ms: int) -> None:
    expected = window.index_key(entry.first_seen_ms, bucket_ms, entry.seq)
    assert window.index_key_of(entry.encode(), bucket_ms) == expected
    assert window.index_key_of(entry.encode()[:16], bucket_ms) == expected  # 16-byte entries


@pytest.mark.parametrize(
    ("bucket", "stream", "lateness", "expired"),
    [
        (0, W + 1_000, 0, True),  # bucket [0, 1000) ends exactly W before stream time
        (0, W + 999, 0, False),
        (0, W + 1_000, 500, False),  # kept for the allowed lateness
        (0, W + 1_500, 500, True),
    ],
)
def test_bucket_expired(bucket: int, stream: int, lateness: int, expired: bool) -> None:
    assert window.bucket_expired(bucket, 1_000, stream, W, lateness) is expired


@pytest.mark.parametrize(("held", "cap", "over"), [(0, 0, False), (10, 10, False), (11, 10, True)])
def test_over_cap(held: int, cap: int, over: bool) -> None:
    assert window.over_cap(held, cap) is over


def test_effective_window() -> None:
    assert window.effective_window_ms(10_000, None) is None
    assert window.effective_window_ms(10_000, 4_000) == 6_000
    assert window.effective_window_ms(10_000, 12_000) == 0


KAFKA_MS = 1_790_000_000_000
NOON_MS = int(datetime(2026, 9, 21, 12, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        (None, KAFKA_MS),
        (12345, KAFKA_MS),
        ("not a time", KAFKA_MS),
        ("2026-09-21T12:00:00.000Z", NOON_MS),
        ("2026-09-21T12:00:00+00:00", NOON_MS),
        ("2026-09-21T12:00:00", NOON_MS),  # no zone: UTC
        ("2099-01-01T00:00:00Z", KAFKA_MS + 3_600_000),  # far future: clamped to Kafka + skew
    ],
)
def test_event_time(field: object, expected: int) -> None:
    assert rules.event_time_ms(field, KAFKA_MS, 3_600_000) == expected


# --- dead-letter headers ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "original",
    [
        [],
        [("traceparent", b"00-abc-def-01")],
        [("b", b"2"), ("a", b"1"), ("b", b"3")],
        [(rules.ERROR_HEADER, b"previous")],
    ],
    ids=["none", "one", "unsorted-with-duplicates", "earlier-error-header"],
)
def test_dead_letter_headers(original: list[tuple[str, bytes]]) -> None:
    bad = Invalid(BadInput.MESSAGE_ID_TOO_LONG, "messageId is 9 bytes, limit 8")
    before = list(original)
    headers = rules.dead_letter_headers(original, bad, "events", 3, 12345)
    assert headers == [
        *before,
        ("dedupe.error", b"message_id_too_long"),
        ("dedupe.error.detail", b"messageId is 9 bytes, limit 8"),
        ("dedupe.source.topic", b"events"),
        ("dedupe.source.partition", b"3"),
        ("dedupe.source.offset", b"12345"),
    ]
    assert original == before  # the input list is not modified


def test_dead_letter_header_names() -> None:
    assert (
        rules.ERROR_HEADER,
        rules.DETAIL_HEADER,
        rules.SOURCE_TOPIC_HEADER,
        rules.SOURCE_PARTITION_HEADER,
        rules.SOURCE_OFFSET_HEADER,
    ) == (
        "dedupe.error",
        "dedupe.error.detail",
        "dedupe.source.topic",
        "dedupe.source.partition",
        "dedupe.source.offset",
    )


@pytest.mark.parametrize(
    ("detail", "encoded"),
    [("plain", b"plain"), ("été", "été".encode()), ("bad \ud800 char", b"bad ? char")],
)
def test_dead_letter_detail_is_utf8(detail: str, encoded: bytes) -> None:
    headers = dict(rules.dead_letter_headers([], Invalid(BadInput.NOT_JSON, detail), "t", 0, 0))
    assert headers[rules.DETAIL_HEADER] == encoded


def test_dead_letter_headers_from_inspect() -> None:
    bad = check(doc(5))
    assert isinstance(bad, Invalid)
    headers = dict(rules.dead_letter_headers([], bad, "in", 7, 0))
    assert headers[rules.ERROR_HEADER] == b"message_id_not_string"
    assert headers[rules.SOURCE_PARTITION_HEADER] == b"7"
    assert headers[rules.SOURCE_OFFSET_HEADER] == b"0"
