"""Table-driven tests of the first sighting and the window (``tables/window.py``) and of an
event's time (``rules.event_time``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from app import rules
from tables import window

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
