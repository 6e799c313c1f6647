"""The request's JSON read and the events' JSON written by orjson, with the standard library
taking over where orjson would differ: every body gives the verdict and the values it gave when
the standard library alone read and wrote it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ingest.events import serialize
from ingest.rejected import Rejected
from ingest.request import parse_json


def stdlib_parse(body: bytes) -> object:
    return json.loads(body.decode("utf-8"))


def test_integers_past_64_bits_are_kept_exact() -> None:
    body = b'{"userId": 123456789012345678901234567890, "n": -9223372036854775809}'
    doc = parse_json(body)
    assert doc == {"userId": 123456789012345678901234567890, "n": -9223372036854775809}
    assert serialize(doc) == b'{"userId":123456789012345678901234567890,"n":-9223372036854775809}'


def test_a_lone_surrogate_is_read_and_refused_when_written_as_before() -> None:
    doc = parse_json(b'{"event": "a\\ud800b"}')
    assert doc == {"event": "a\ud800b"}
    with pytest.raises(UnicodeEncodeError):
        serialize(doc)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"a": NaN}', "NaN is not valid JSON"),
        (b'{"a": 1,}', "body is not valid JSON"),
        (b'\xff{"a": 1}', "body is not UTF-8 (byte 0)"),
        (b"[1, 2]", "body must be a JSON object, not an array"),
    ],
)
def test_refusals_keep_the_standard_librarys_verdict(body: bytes, message: str) -> None:
    with pytest.raises(Rejected) as caught:
        parse_json(body)
    assert caught.value.status == 400
    assert message in str(caught.value)


JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.dictionaries(st.text(), JSON, max_size=6))
def test_any_object_reads_and_writes_to_the_same_values(doc: dict[str, object]) -> None:
    body = json.dumps(doc, ensure_ascii=False, allow_nan=True).encode("utf-8", "surrogatepass")
    try:
        expected = stdlib_parse(body)
    except (UnicodeDecodeError, ValueError):
        with pytest.raises(Rejected):
            parse_json(body)
        return
    got = parse_json(body)
    assert got == expected
    try:
        written = serialize(got)
    except UnicodeEncodeError:
        return  # refused as the standard library refuses it (lone surrogates)
    assert json.loads(written) == expected
