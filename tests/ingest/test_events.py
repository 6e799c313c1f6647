"""Table-driven tests of ``ingest/events.py``: Segment's rules for events and batches, the
prepared records and their message ids. No broker, no HTTP."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from app import rules
from ingest.events import derive_message_id, events_of, prepare, received_at_text
from ingest.rejected import Rejected
from tests.ingest.events_support import LIMITS, rejected

NOW = "2030-01-02T03:04:05.678Z"


def track(n: int = 0, **extra: Any) -> dict[str, Any]:
    return {"type": "track", "event": "Clicked", "userId": f"u{n}", **extra}


# --- events ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["track", "identify", "page", "screen", "group", "alias"])
def test_single_event_endpoints_set_the_type_from_the_path(kind: str) -> None:
    [event] = events_of(kind, {"type": "something-else", "userId": "u1", "writeKey": "k"}, LIMITS)
    assert event == {"type": kind, "userId": "u1"}  # writeKey never reaches Kafka


def test_batch_context_integrations_and_sent_at_apply_to_every_event() -> None:
    doc = {
        "writeKey": "k1",
        "sentAt": "2030-01-01T00:00:00Z",
        "context": {"library": {"name": "x"}, "ip": "1.2.3.4"},
        "integrations": {"All": False},
        "batch": [
            track(1),
            track(2, context={"ip": "5.6.7.8"}, sentAt="own", writeKey="leak"),
        ],
    }
    first, second = events_of("batch", doc, LIMITS)
    assert first["context"] == {"library": {"name": "x"}, "ip": "1.2.3.4"}
    assert first["integrations"] == {"All": False}
    assert first["sentAt"] == "2030-01-01T00:00:00Z"
    assert second["context"] == {"library": {"name": "x"}, "ip": "5.6.7.8"}  # own keys win
    assert second["sentAt"] == "own"
    assert "writeKey" not in first and "writeKey" not in second


BAD_BATCHES: list[tuple[str, dict[str, Any], str, str]] = [
    ("no batch", {"events": []}, "invalid_batch", "no 'batch'"),
    ("batch not array", {"batch": {"a": 1}}, "invalid_batch", "not an object"),
    ("empty batch", {"batch": []}, "invalid_batch", "empty"),
    ("too many", {"batch": [track(i) for i in range(2501)]}, "too_many_events", "2501"),
    ("item not object", {"batch": [track(), 7]}, "invalid_event", "batch[1]"),
    ("unknown type", {"batch": [track(), {"type": "click"}]}, "invalid_type", "batch[1]"),
    ("no type", {"batch": [{"userId": "u"}]}, "invalid_type", "batch[0]"),
    (
        "no user",
        {"batch": [track(), {"type": "page", "name": "Home"}]},
        "no_user_anon_id",
        "batch[1]: a page event needs 'userId' or 'anonymousId'",
    ),
    ("track no event", {"batch": [{"type": "track", "userId": "u"}]}, "no_event_name", "'event'"),
    (
        "group no groupId",
        {"batch": [{"type": "group", "userId": "u"}]},
        "no_group_id",
        "groupId",
    ),
    (
        "alias no previousId",
        {"batch": [{"type": "alias", "userId": "u"}]},
        "no_previous_id",
        "previousId",
    ),
    ("alias no userId", {"batch": [{"type": "alias", "previousId": "p"}]}, "no_user_id", "userId"),
    ("id number", {"batch": [track(messageId=5)]}, "invalid_message_id", "non-empty string"),
    ("id empty", {"batch": [track(messageId="")]}, "invalid_message_id", "non-empty string"),
    (
        "id too long",
        {"batch": [track(messageId="x" * 257)]},
        "invalid_message_id",
        "257 bytes; the limit is 256",
    ),
    (
        "event too large",
        {"batch": [track(1), track(2), track(3, properties={"pad": "p" * 33_000})]},
        "event_too_large",
        "batch[2] is",
    ),
    ("lone surrogate", {"batch": [track(properties={"s": "\ud800"})]}, "invalid_unicode", "[0]"),
]


@pytest.mark.parametrize(
    ("doc", "code", "fragment"),
    [case[1:] for case in BAD_BATCHES],
    ids=[case[0] for case in BAD_BATCHES],
)
def test_bad_batches_are_400_naming_the_event(
    doc: dict[str, Any], code: str, fragment: str
) -> None:
    with pytest.raises(Rejected) as exc:
        prepare("batch", doc, "k1", NOW, LIMITS)
    assert fragment in rejected(exc, 400, code)


def test_an_event_exactly_at_the_limit_passes_and_one_byte_more_fails() -> None:
    base = track(messageId="m-1", properties={"pad": ""})
    [small] = prepare("batch", {"batch": [base]}, "k", NOW, LIMITS)
    pad = "p" * (LIMITS.max_event_bytes - len(small.value))
    [exact] = prepare("batch", {"batch": [{**base, "properties": {"pad": pad}}]}, "k", NOW, LIMITS)
    assert len(exact.value) == LIMITS.max_event_bytes
    with pytest.raises(Rejected) as exc:
        prepare("batch", {"batch": [{**base, "properties": {"pad": pad + "p"}}]}, "k", NOW, LIMITS)
    rejected(exc, 400, "event_too_large")


def test_identifiers_may_be_numbers_and_anonymous() -> None:
    docs = [
        {"type": "identify", "anonymousId": "a1"},
        {"type": "identify", "userId": 42},
        {"type": "alias", "userId": "u", "previousId": "a1"},
        {"type": "group", "anonymousId": "a", "groupId": 7},
    ]
    assert len(prepare("batch", {"batch": docs}, None, NOW, LIMITS)) == 4


# --- prepared records and message ids ----------------------------------------------------


def test_prepare_keeps_the_event_sets_received_at_and_keys_by_message_id() -> None:
    event = track(messageId="abc-1", properties={"é": "ü", "n": 1.5}, timestamp="2030-01-01Z")
    [rec] = prepare("batch", {"batch": [event], "sentAt": "s"}, "k1", NOW, LIMITS)
    assert rec.message_id == "abc-1" and rec.key == b"abc-1"
    doc = json.loads(rec.value)
    assert doc == {**event, "sentAt": "s", "receivedAt": NOW}
    assert "é" in rec.value.decode()  # UTF-8, compact, not \\u-escaped
    assert b" " not in rec.value.replace(b"Clicked", b"")
    assert rules.inspect(rec.value, max_event_bytes=32768, max_id_bytes=256) == rules.Valid(
        "abc-1", b"abc-1", "2030-01-01Z"
    )


def test_received_at_overrides_what_the_client_sent() -> None:
    [rec] = prepare("track", {"userId": "u", "event": "e", "receivedAt": "fake"}, "k", NOW, LIMITS)
    assert json.loads(rec.value)["receivedAt"] == NOW


def test_received_at_text_is_iso_utc_with_ms() -> None:
    when = datetime(2030, 1, 2, 3, 4, 5, 678_901, tzinfo=UTC)
    assert received_at_text(when) == "2030-01-02T03:04:05.678Z"


def test_derived_ids_are_uuid4_and_stable_across_attempts() -> None:
    first = prepare("batch", {"batch": [track(1), track(2)], "sentAt": "t1"}, "k1", NOW, LIMITS)
    retry = prepare(
        "batch",
        {"batch": [track(1), track(2)], "sentAt": "t2"},
        "k1",
        "2031-01-01T00:00:00.000Z",
        LIMITS,
    )
    assert [r.message_id for r in first] == [r.message_id for r in retry]
    for rec in first:
        parsed = uuid.UUID(rec.message_id)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert str(parsed) == rec.message_id
    assert first[0].message_id != first[1].message_id


def test_derived_ids_ignore_key_order_and_differ_by_content_and_write_key() -> None:
    a = {"type": "track", "event": "e", "userId": "u", "properties": {"x": 1, "y": 2}}
    b = {"properties": {"y": 2, "x": 1}, "userId": "u", "event": "e", "type": "track"}
    assert derive_message_id("k", a) == derive_message_id("k", b)
    assert derive_message_id("k", a) != derive_message_id("other", a)
    assert derive_message_id("k", a) != derive_message_id("k", {**a, "timestamp": "t"})
    assert derive_message_id("k", a) == derive_message_id("k", {**a, "receivedAt": "r"})


def test_the_documented_trade_off_identical_events_without_ids_share_an_id() -> None:
    records = prepare("batch", {"batch": [track(1), track(1)]}, "k", NOW, LIMITS)
    assert records[0].message_id == records[1].message_id


def test_client_message_ids_are_kept() -> None:
    records = prepare("batch", {"batch": [track(1, messageId="m")]}, "k", NOW, LIMITS)
    assert [r.message_id for r in records] == ["m"]
