"""Table-driven tests of the strategy rules (``app/strategy.py``), the verdict with content
hashes (``tables/window.py``) and the producer-sequence rules (``tables/producers.py``)."""

from __future__ import annotations

import json

import pytest

from app import strategy
from app.strategy import Meta, ProducerSequence, Strategy
from tables import producers, window

POLICIES = {
    b"web": Strategy.MESSAGE_ID,
    b"billing": Strategy.PRODUCER_SEQUENCE,
    b"legacy": Strategy.OFF,
}


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ([], strategy.NO_META),
        ([("other", b"x")], strategy.NO_META),
        ([("dedupe.source", b"web")], Meta(b"web")),
        ([("dedupe.producer", b"p1"), ("dedupe.sequence", b"7")], Meta(None, b"p1", b"7")),
        ([("dedupe.source", b"a"), ("dedupe.source", b"b")], Meta(b"b")),  # the last wins
    ],
)
def test_read_meta(headers: list[tuple[str, bytes]], expected: Meta) -> None:
    assert strategy.read_meta(headers) == expected


@pytest.mark.parametrize(
    ("meta", "default", "expected"),
    [
        (Meta(), Strategy.MESSAGE_ID, Strategy.MESSAGE_ID),
        (Meta(), Strategy.OFF, Strategy.OFF),
        (Meta(b"web"), Strategy.OFF, Strategy.MESSAGE_ID),  # the source's policy wins
        (Meta(b"legacy"), Strategy.MESSAGE_ID, Strategy.OFF),
        (Meta(b"unknown"), Strategy.MESSAGE_ID, Strategy.MESSAGE_ID),
        (Meta(None, b"p", b"1"), Strategy.MESSAGE_ID, Strategy.PRODUCER_SEQUENCE),
        (Meta(None, b"p", None), Strategy.MESSAGE_ID, Strategy.PRODUCER_SEQUENCE),
        (Meta(None, None, b"1"), Strategy.MESSAGE_ID, Strategy.PRODUCER_SEQUENCE),
        # producer headers, but the source's policy says otherwise
        (Meta(b"web", b"p", b"1"), Strategy.MESSAGE_ID, Strategy.MESSAGE_ID),
        (Meta(b"legacy", b"p", b"1"), Strategy.MESSAGE_ID, Strategy.OFF),
        (Meta(b"unknown", b"p", b"1"), Strategy.OFF, Strategy.PRODUCER_SEQUENCE),
    ],
)
def test_choose(meta: Meta, default: Strategy, expected: Strategy) -> None:
    assert strategy.choose(meta, POLICIES, default) is expected


@pytest.mark.parametrize(
    ("meta", "expected"),
    [
        (Meta(None, b"p1", b"0"), ProducerSequence(b"p1", 0)),
        (Meta(None, b"p1", b"42"), ProducerSequence(b"p1", 42)),
        (Meta(None, b"p", b"9223372036854775807"), ProducerSequence(b"p", 2**63 - 1)),
        (Meta(None, "prod-é".encode(), b"007"), ProducerSequence("prod-é".encode(), 7)),
        (Meta(None, None, b"1"), "no dedupe.producer header"),
        (Meta(None, b"", b"1"), "empty producer name"),
        (Meta(None, b"p" * 256, b"1"), "producer name is 256 bytes, limit 255"),
        (Meta(None, b"\xff", b"1"), "producer name is not UTF-8"),
        (Meta(None, b"p", None), "no dedupe.sequence header"),
        (Meta(None, b"p", b""), "sequence '' is not 1-19 ASCII digits"),
        (Meta(None, b"p", b"-1"), "sequence '-1' is not 1-19 ASCII digits"),
        (Meta(None, b"p", b"1.0"), "sequence '1.0' is not 1-19 ASCII digits"),
        (Meta(None, b"p", b" 1"), "sequence ' 1' is not 1-19 ASCII digits"),
        (
            Meta(None, b"p", b"12345678901234567890"),
            "sequence '12345678901234567890' is not 1-19 ASCII digits",
        ),
        (Meta(None, b"p", b"9223372036854775808"), "sequence 9223372036854775808 is above 2^63-1"),
        # ARABIC-INDIC DIGIT ONE: bytes.isdigit() is ASCII-only, so not a digit here
        (Meta(None, b"p", "\u0661".encode()), "sequence '\ufffd\ufffd' is not 1-19 ASCII digits"),
    ],
)
def test_producer_sequence(meta: Meta, expected: ProducerSequence | str) -> None:
    assert strategy.producer_sequence(meta) == expected


def test_policies_parse_and_every_bad_entry_is_named() -> None:
    assert strategy.parse_policies("") == {}
    assert strategy.parse_policies(" web = message_id , legacy=off,") == {
        b"web": Strategy.MESSAGE_ID,
        b"legacy": Strategy.OFF,
    }
    with pytest.raises(ValueError) as info:
        strategy.parse_policies("web=message_id,web=off,b=fingerprint,c,=off")
    message = str(info.value)
    for bad in ("web (twice)", "b=fingerprint", "c", "=off"):
        assert bad in message
    assert "message_id|producer_sequence|off" in message


EXCLUDE = strategy.field_list("sentAt, receivedAt,_metadata")


def test_fingerprint_ignores_key_order_whitespace_and_excluded_fields() -> None:
    a = {"type": "track", "event": "Signed Up", "properties": {"b": 2, "a": 1}, "sentAt": "x"}
    b = json.loads(
        '{"properties":{"a":1,"b":2},  "event":"Signed Up","type":"track",'
        '"sentAt":"y","receivedAt":"z","_metadata":{"k":1}}'
    )
    assert strategy.fingerprint(a, EXCLUDE) == strategy.fingerprint(b, EXCLUDE)
    fp = strategy.fingerprint(a, EXCLUDE)
    assert len(fp) == 32 and int(fp, 16) >= 0 and fp == fp.lower()


@pytest.mark.parametrize(
    "other",
    [
        {"type": "track", "event": "Signed Up", "properties": {"a": 1, "b": 3}},
        {"type": "track", "event": "Signed up", "properties": {"a": 1, "b": 2}},
        {"type": "track", "event": "Signed Up", "properties": {"a": 1, "b": 2}, "n": None},
        {"type": "track", "event": "Signed Up", "properties": {"a": 1, "b": 2.0}},
        {"type": "track", "event": "Signed Up", "properties": {"a": 1, "b": "2"}},
    ],
)
def test_fingerprint_tells_other_content_apart(other: dict[str, object]) -> None:
    one = {"type": "track", "event": "Signed Up", "properties": {"a": 1, "b": 2}}
    assert strategy.fingerprint(one, EXCLUDE) != strategy.fingerprint(other, EXCLUDE)
    assert strategy.content_hash(one, EXCLUDE) != strategy.content_hash(other, EXCLUDE)


def test_canonical_form_of_big_integers_is_stable() -> None:
    doc = json.loads('{"n": 123456789012345678901234567890, "a": [1, {"z": 1, "y": 2}]}')
    assert strategy.canonical(doc, frozenset()) == (
        b'{"a":[1,{"y":2,"z":1}],"n":123456789012345678901234567890}'
    )
    assert strategy.canonical({"é": "ü"}, frozenset()) == '{"é":"ü"}'.encode()


def test_keys_of_the_three_kinds_never_collide() -> None:
    fp = "0" * 32
    keys = {
        b"m-1",
        strategy.scoped_key(b"m-1", b"web"),
        strategy.scoped_key(b"m-1", b"api"),
        strategy.scoped_key(b"web" + b"m-1", b""),  # no source: the id itself
        strategy.fingerprint_key(fp),
        fp.encode(),
    }
    assert len(keys) == 6
    assert strategy.scoped_key(b"m-1", None) == b"m-1"
    # a length prefix: ("ab", "c") and ("a", "bc") are different keys
    assert strategy.scoped_key(b"c", b"ab") != strategy.scoped_key(b"bc", b"a")


W = 1000
H = b"h" * 8
OTHER = b"o" * 8


@pytest.mark.parametrize(
    ("held", "record_ms", "content", "expected"),
    [
        (None, 5, b"", window.Verdict.FIRST),
        (None, 5, H, window.Verdict.FIRST),
        (window.Entry(0, 1), W - 1, b"", window.Verdict.REPEAT),
        (window.Entry(0, 1), W, b"", window.Verdict.FIRST),
        (window.Entry(0, 1, 0, H), 10, H, window.Verdict.REPEAT),
        (window.Entry(0, 1, 0, H), 10, OTHER, window.Verdict.REUSED),
        (window.Entry(0, 1, 0, H), W, OTHER, window.Verdict.FIRST),  # past the window: new event
        (window.Entry(0, 1, 0, b""), 10, OTHER, window.Verdict.REPEAT),  # kept without a hash
        (window.Entry(0, 1, 0, H), 10, b"", window.Verdict.REPEAT),  # verification off
    ],
)
def test_judge(
    held: window.Entry | None, record_ms: int, content: bytes, expected: window.Verdict
) -> None:
    assert window.judge(held, record_ms, W, content) is expected


def test_entries_with_a_content_hash_round_trip_and_keep_their_sighting() -> None:
    entry = window.Entry(1_790_000_000_123, 42, 3, H)
    raw = entry.encode()
    assert len(raw) == 28 and window.Entry.decode(raw) == entry
    assert window.Entry.decode(raw).repeated() == window.Entry(1_790_000_000_123, 42, 4, H)
    plain = window.Entry(1_790_000_000_123, 42, 3).encode()
    assert len(plain) == 20
    assert raw[window.SIGHTING] == plain[window.SIGHTING]  # counted in the same slot


@pytest.mark.parametrize(
    ("held", "sequence", "repeat"),
    [
        (None, 0, False),
        (producers.ProducerState(5, 0), 4, True),
        (producers.ProducerState(5, 0), 5, True),
        (producers.ProducerState(5, 0), 6, False),
        (producers.ProducerState(5, 0), 100, False),  # gaps are allowed
    ],
)
def test_producer_repeat(held: producers.ProducerState | None, sequence: int, repeat: bool) -> None:
    assert producers.is_repeat(held, sequence) is repeat


@pytest.mark.parametrize(
    ("active_ms", "stream_ms", "expected"),
    [(0, 999, False), (0, 1000, True), (500, 1000, False), (1000, 1000, False)],
)
def test_producer_idle(active_ms: int, stream_ms: int, expected: bool) -> None:
    assert producers.idle(active_ms, stream_ms, 1000) is expected


def test_producer_state_round_trips() -> None:
    state = producers.ProducerState(2**63 - 1, 1_790_000_000_123)
    assert producers.ProducerState.decode(state.encode()) == state
    assert len(state.encode()) == 16
