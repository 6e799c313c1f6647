"""Table-driven tests of ``rules.inspect``, the input contract: bad input and why, orjson's
verdict against the standard library's, valid input and the size limit."""

from __future__ import annotations

import json

import pytest

from app import rules
from app.rules import BadInput, Invalid, Valid
from tests.unit.app.rules_support import MAX_EVENT, MAX_ID, check, doc


def event_of_size(size: int, message_id: str = "abc") -> bytes:
    """A valid JSON event of exactly ``size`` bytes (padding in a ``pad`` field)."""
    head = json.dumps({"messageId": message_id, "pad": ""}, separators=(",", ":")).encode()
    pad = size - len(head)
    assert pad >= 0
    value = head[:-2] + b"x" * pad + b'"}'
    assert len(value) == size
    return value


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
