"""Property-based tests (Hypothesis) of the worker's input contract: whatever bytes, key,
partition and headers a record has, ``rules.inspect`` gives a verdict without raising, the
same verdict every time and the one the standard library alone would give, and
``Deduplicator.handle`` sends the record to exactly one place (output, dead-letter with the
reason, repartition) or drops it as a repeat.

How to run: ``.venv/bin/python -m pytest -q tests/unit/app/worker/test_fuzz_input.py`` (part of
``make test-unit``). A failure prints the smallest input Hypothesis found.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app import rules
from app.settings import Settings
from app.worker.dedup import Deduplicator, RecordOutcome
from tests.unit.app.worker.test_agent import FakeSeenIds, FakeTxn, Msg

PARTITIONS = 4
SETTINGS = Settings.from_env(
    {
        "DEDUPE_PARTITIONS": str(PARTITIONS),
        "DEDUPE_MAX_EVENT_BYTES": "400",  # small limits, so that examples reach them
        "DEDUPE_MAX_MESSAGE_ID_BYTES": "24",
    }
)
LIMITS = {"max_event_bytes": SETTINGS.max_event_bytes, "max_id_bytes": 24}

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**30), max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
#: Ids short and long (multi-byte characters cross the 24-byte limit), empty, not strings.
message_ids = (
    st.text(min_size=1, max_size=8)
    | st.text(alphabet="é€𝄞a", min_size=5, max_size=12)
    | st.just("")
    | json_values
)
documents = (
    st.fixed_dictionaries(
        {},
        optional={
            "messageId": message_ids,
            "type": st.sampled_from(["track", "identify"]),
            "timestamp": st.text(max_size=30) | json_values,
            "properties": json_values,
        },
    )
    | json_values
)


@st.composite
def values(draw: st.DrawFn) -> bytes | None:
    """A record value: none, raw bytes, or a JSON document encoded (maybe not as UTF-8),
    maybe damaged (cut short, a byte changed, bytes inserted), maybe with a lone surrogate or
    NaN or a number out of range spliced in, or padded past the size limit."""
    kind = draw(
        st.sampled_from(["none", "bytes", "doc", "damaged", "spliced", "padded", *["event"] * 4])
    )
    if kind == "none":
        return None
    if kind == "bytes":
        return draw(st.binary(max_size=60))
    if kind == "event":  # a well-formed event; ids from a small pool, so that some repeat
        mid = draw(st.sampled_from(["m-1", "m-2", "é-3", "𝄞-4"]))
        doc = {"messageId": mid, "type": "track", "properties": draw(json_values)}
        return json.dumps(doc, ensure_ascii=draw(st.booleans())).encode()
    doc = draw(documents)
    text = json.dumps(doc, ensure_ascii=draw(st.booleans()))
    raw = text.encode(draw(st.sampled_from(["utf-8", "utf-8", "utf-16", "latin-1"])), "replace")
    if kind == "damaged" and raw:
        at = draw(st.integers(0, len(raw) - 1))
        how = draw(st.sampled_from(["cut", "flip", "insert"]))
        if how == "cut":
            raw = raw[:at]
        elif how == "flip":
            raw = raw[:at] + bytes([raw[at] ^ draw(st.integers(1, 255))]) + raw[at + 1 :]
        else:
            raw = raw[:at] + draw(st.binary(min_size=1, max_size=4)) + raw[at:]
    elif kind == "spliced" and text.startswith("{") and len(text) > 2:
        extra = draw(st.sampled_from(['"\\ud800"', "NaN", "-Infinity", "1e400", "9" * 30]))
        key = draw(st.sampled_from(["messageId", "x"]))
        raw = ("{" + json.dumps(key) + ":" + extra + "," + text[1:]).encode()
    elif kind == "padded" and text.startswith("{"):
        raw = ('{"pad":"' + "x" * 400 + '",' + text[1:]).encode()
    return raw


def nesting(value: bytes) -> int:
    return value.count(b"[") + value.count(b"{")


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(value=values())
def test_inspect_never_raises_and_gives_the_standard_librarys_verdict(value: bytes | None) -> None:
    verdict = rules.inspect(value, **LIMITS)
    event(verdict.reason.value if isinstance(verdict, rules.Invalid) else "valid")
    assert verdict == rules.inspect(value, **LIMITS)  # the same on replay
    if isinstance(verdict, rules.Invalid):
        assert isinstance(verdict.reason, rules.BadInput) and verdict.detail
        verdict.detail.encode("utf-8", "replace")
    else:
        assert value is not None and len(value) <= LIMITS["max_event_bytes"]
        doc = json.loads(value.decode("utf-8"))
        assert doc["messageId"] == verdict.message_id
        assert verdict.id_bytes == verdict.message_id.encode("utf-8")
        assert 0 < len(verdict.id_bytes) <= LIMITS["max_id_bytes"]
    if value is not None and len(value) <= LIMITS["max_event_bytes"] and nesting(value) < 900:
        # orjson first and the standard library for what it refuses: the verdict must be the
        # one the standard library alone gives (rules.inspect's docstring).
        alone = rules._inspect_stdlib(value, LIMITS["max_id_bytes"])
        assert type(alone) is type(verdict)
        if isinstance(alone, rules.Invalid):
            assert isinstance(verdict, rules.Invalid) and alone.reason == verdict.reason
        else:
            assert isinstance(verdict, rules.Valid) and alone.message_id == verdict.message_id


records = st.builds(
    Msg,
    topic=st.sampled_from([SETTINGS.input_topic, SETTINGS.repartition_topic]),
    partition=st.integers(0, PARTITIONS - 1),
    offset=st.integers(0, 10**9),
    key=st.none() | st.binary(max_size=30) | st.sampled_from([b"a", b"b", "é".encode()]),
    value=values(),
    headers=st.lists(st.tuples(st.text(max_size=5), st.binary(max_size=5)), max_size=2),
    timestamp=st.floats(1.79e9, 1.79e9 + 86400),  # inside one window: a repeat is a repeat
)


def keyed(msg: Msg) -> Msg:
    """Half the records keyed by their own messageId and placed where it hashes (the common
    case, forwarded or dropped), as a well-behaved producer sends them."""
    verdict = rules.inspect(msg.value, **LIMITS)
    if isinstance(verdict, rules.Valid):
        msg.key = verdict.id_bytes
        msg.partition = rules.partition_for(verdict.id_bytes, PARTITIONS)
    return msg


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batch=st.lists(records, max_size=25), placed=st.lists(st.booleans(), max_size=25))
def test_every_record_goes_to_exactly_one_place(batch: list[Msg], placed: list[bool]) -> None:
    for msg, place in zip(batch, placed, strict=False):
        if place:
            keyed(msg)
    dedup = Deduplicator(SETTINGS, FakeSeenIds())  # type: ignore[arg-type]
    forwarded: set[bytes] = set()

    async def run() -> None:
        for msg in batch:
            txn = FakeTxn()
            ms = round(msg.timestamp * 1000) if msg.timestamp >= 0 else None
            outcome = await dedup.handle(txn, msg, ms)  # type: ignore[arg-type]
            event(outcome)
            verdict = rules.inspect(msg.value, **LIMITS)
            check(msg, outcome, txn, verdict, forwarded)

    asyncio.run(run())


def check(
    msg: Msg,
    outcome: str,
    txn: FakeTxn,
    verdict: rules.Valid | rules.Invalid,
    forwarded: set[bytes],
) -> None:
    sent: list[Any] = txn.sent
    if isinstance(verdict, rules.Invalid):
        assert outcome == RecordOutcome.DEAD_LETTERED
        [dead] = sent
        headers = dict(dead.headers)
        assert dead.topic == SETTINGS.dlq_topic and dead.value == msg.value
        assert headers[rules.ERROR_HEADER] == verdict.reason.value.encode()
        assert headers[rules.SOURCE_OFFSET_HEADER] == str(msg.offset).encode()
        return
    home = rules.partition_for(verdict.id_bytes, PARTITIONS)
    # Re-keyed exactly when not keyed and placed by its id, from either topic: a repartition
    # record placed under an older partition count goes round once more (app/admin/grow.py).
    placed = msg.key == verdict.id_bytes and msg.partition == home
    if outcome == RecordOutcome.REKEYED:
        [again] = sent
        assert not placed
        assert again.topic == SETTINGS.repartition_topic and again.key == verdict.id_bytes
        assert again.partition == home
        return
    assert placed
    if outcome == RecordOutcome.DUPLICATE:
        assert sent == [] and verdict.id_bytes in forwarded
        return
    assert outcome == RecordOutcome.FORWARDED, outcome
    [out] = sent
    assert out.topic == SETTINGS.output_topic and out.key == verdict.id_bytes
    assert out.value == msg.value and out.partition == msg.partition
    assert verdict.id_bytes not in forwarded
    forwarded.add(verdict.id_bytes)
