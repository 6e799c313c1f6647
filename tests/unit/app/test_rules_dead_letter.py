"""Table-driven tests of the dead-letter headers ``app/rules.py`` gives bad input."""

from __future__ import annotations

import pytest

from app import rules
from app.rules import BadInput, Invalid
from tests.unit.app.rules_support import check, doc

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
