"""The native messageId scan (``dedupe_native.message_ids``, native/src/message_id.rs) against
``app.rules.inspect``, the reference: wherever the scan answers an id, inspect finds the value
valid with exactly those id bytes; where it is not certain it answers None and the worker runs
inspect. Hypothesis writes JSON the way producers do and the ways they should not (duplicate
keys, escapes, whitespace, deep nesting, the tokens only Python's json takes, numbers past a
double or a 64-bit int, broken UTF-8, byte flips and truncations), and a set of plain events
must be answered natively, so a scan that always answered None would fail here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import dedupe_native
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app import rules
from tests.unit.adapters.test_fetched_records import build_batch

MAX_EVENT = 2_000
MAX_ID = 40


@dataclass
class Rec:
    """A record as aiokafka's ConsumerRecord offers it (the scan reads ``key`` and ``value``)."""

    key: bytes | None
    value: bytes | None


@dataclass
class Obj:
    """A JSON object as written, members in order, duplicates kept."""

    members: list[tuple[str, Any]]


class Plain(str):
    """A string written between quotes as it is, without escapes."""


WHITESPACE = st.sampled_from(["", "", " ", "\n", "\t ", "\r\n"])


def scalars() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.none(),
        st.booleans(),
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(allow_nan=False, allow_infinity=False),
        st.text(max_size=12),
    )


def values() -> st.SearchStrategy[Any]:
    return st.recursive(
        scalars(),
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(st.tuples(st.text(max_size=6), inner), max_size=4).map(Obj),
        ),
        max_leaves=12,
    )


@st.composite
def written(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON text, with whitespace and escaping chosen by hypothesis."""
    ws = draw(WHITESPACE)
    if isinstance(value, Obj):
        items = [
            f"{ws}{draw(written(k))}{draw(WHITESPACE)}:{ws}{draw(written(v))}"
            for k, v in value.members
        ]
        return "{" + ",".join(items) + ws + "}"
    if isinstance(value, Plain):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ",".join(ws + draw(written(v)) for v in value) + ws + "]"
    return json.dumps(value, ensure_ascii=draw(st.booleans()))


@st.composite
def events(draw: st.DrawFn) -> bytes:
    """A top-level object with messageId members of any kind (none, one, several: the last one
    counts), written in UTF-8."""
    members = draw(st.lists(st.tuples(st.text(max_size=6), values()), max_size=5))
    ids = st.one_of(
        st.text(max_size=50),
        st.text(alphabet="abcdef0123456789-", min_size=1, max_size=36),
        values(),
    )
    for _ in range(draw(st.integers(0, 2))):
        at = draw(st.integers(0, len(members)))
        members.insert(at, ("messageId", draw(ids)))
    text = draw(WHITESPACE) + draw(written(Obj(members))) + draw(WHITESPACE)
    return text.encode("utf-8", "surrogatepass")


ODD_TOKENS = [
    b"NaN",
    b"Infinity",
    b"-Infinity",
    b"1e400",
    b"-1e400",
    b"123456789012345678901234567890123",
    b"1" * 5000,
    b"0.1e-400",
    b"01",
    b"1.",
    b".5",
    b'"\\ud800"',
    b'"\\x41"',
    b'"a\x01b"',
    b"[" * 70 + b"]" * 70,
    b'{"a":' * 70 + b"1" + b"}" * 70,
    b"tru",
    b"\xff",
    b"\xed\xa0\x80",
]


@st.composite
def odd_events(draw: st.DrawFn) -> bytes:
    """A plain event with one odd token as a member's value, a BOM, an escaped key or bytes
    flipped, cut or inserted."""
    base = b'{"messageId":"id-1","n":%s,"x":{"y":[1,2]}}'
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return base % draw(st.sampled_from(ODD_TOKENS))
    if kind == 1:
        return b"\xef\xbb\xbf" + base % b"1"
    if kind == 2:
        key = draw(st.sampled_from([b"message\\u0049d", b"\\u006dessageId", b"messageI\\u0064"]))
        return b'{"messageId":"a","' + key + b'":"b"}'
    raw = bytearray(draw(events()) if draw(st.booleans()) else base % b"1")
    if raw:
        at = draw(st.integers(0, len(raw) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            raw[at] = draw(st.integers(0, 255))
        elif op == 1:
            del raw[at:]
        else:
            raw.insert(at, draw(st.integers(0, 255)))
    return bytes(raw)


def reference(value: bytes | None) -> bytes | None:
    checked = rules.inspect(value, max_event_bytes=MAX_EVENT, max_id_bytes=MAX_ID)
    return checked.id_bytes if isinstance(checked, rules.Valid) else None


def scan(records: list[Any]) -> list[bytes | None]:
    found: list[bytes | None] = dedupe_native.message_ids(records, MAX_EVENT, MAX_ID)
    return found


@settings(max_examples=700, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(events(), odd_events(), st.none()), min_size=1, max_size=8))
def test_an_id_the_scan_answers_is_the_one_inspect_finds(batch: list[bytes | None]) -> None:
    records = [Rec(None, v) for v in batch]
    for value, found in zip(batch, scan(records), strict=True):
        if found is not None:
            assert found == reference(value), value


#: Characters a JSON string may hold unescaped (no quote, backslash, control or surrogate).
PLAIN_CHARACTERS = st.characters(
    exclude_characters='"\\', min_codepoint=0x20, exclude_categories=("Cs",)
)


@st.composite
def plain_events(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """Events as producers write them: a messageId of plain characters, other members of any
    JSON, whitespace anywhere, no escapes in the top-level keys or the id."""
    plain = st.text(PLAIN_CHARACTERS, max_size=10)
    message_id = draw(plain.filter(bool))
    keys = plain.filter(lambda k: k != "messageId").map(Plain)
    members: list[tuple[str, Any]] = draw(st.lists(st.tuples(keys, values()), max_size=4))
    members.insert(draw(st.integers(0, len(members))), (Plain("messageId"), Plain(message_id)))
    return draw(written(Obj(members))).encode(), message_id.encode()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(plain_events())
def test_plain_events_are_answered_natively(event: tuple[bytes, bytes]) -> None:
    value, message_id = event
    # json.dumps wrote every string member: numbers past a double, an escape in the id (none
    # here) or a key, nesting past the limit are what the scan leaves to inspect.
    (found,) = scan([Rec(None, value)])
    assert reference(value) == message_id
    if (
        b"e+" not in value
        and b"E" not in value
        and not any(len(tok) > 32 for tok in value.replace(b",", b" ").replace(b":", b" ").split())
    ):
        assert found == message_id, value


def test_the_limits_and_the_usual_refusals() -> None:
    ok = b'{"messageId":"abc"}'
    cases = {
        ok: b"abc",
        b' \n{ "a" : [1, {"b": null}], "messageId" : "abc" } \t': b"abc",
        b'{"messageId":"x","messageId":"abc"}': b"abc",  # the last one counts
        b'{"messageId":"abc","messageId":1}': None,  # ... and it is no string
        b'{"messageId":""}': None,
        b'{"messageId":"a\\u0062c"}': None,  # an escape in the id: inspect decodes it
        b'{"messageId":"' + b"a" * (MAX_ID + 1) + b'"}': None,
        b'{"other":"abc"}': None,
        b'["abc"]': None,
        b'{"messageId":"abc"} x': None,
        b'{"messageId":"abc",}': None,
        b'{"messageId":"abc","n":' + b" " * MAX_EVENT + b"1}": None,  # over the event limit
        '{"messageId":"caf\u00e9"}'.encode(): "caf\u00e9".encode(),
    }
    records = [Rec(None, v) for v in cases]
    assert scan(records) == list(cases.values())
    for value, found in cases.items():
        if found is not None:
            assert reference(value) == found


def test_a_record_keyed_by_its_id_gets_its_own_key_back() -> None:
    key = b"abc"
    (same, other, none) = scan(
        [Rec(key, b'{"messageId":"abc"}'), Rec(b"zzz", b'{"messageId":"abc"}'), Rec(key, None)]
    )
    assert same is key
    assert other == b"abc" and other is not key
    assert none is None


def test_native_records_are_read_without_their_attributes() -> None:
    """The worker's records come from the native decoder: the scan reads their fields
    directly and answers as for any record."""
    values = [b'{"messageId":"m-%d"}' % i for i in range(5)] + [b"not json"]
    batch = build_batch(7, [(0, b"m-%d" % i, v, []) for i, v in enumerate(values)])
    decoded = dedupe_native.unpack(batch, "t", 0, 0, [], True)
    assert decoded is not None
    records, _ = decoded
    assert type(records[0]).__name__ == "Record"
    found = scan(records)
    assert found == [b"m-%d" % i for i in range(5)] + [None]
    assert all(f is r.key for f, r in zip(found[:5], records, strict=False))
