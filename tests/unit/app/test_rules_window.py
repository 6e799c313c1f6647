"""Table-driven tests of the first sighting and the window (``tables/window.py``) and of an
event's time (``rules.event_time``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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
    "encoded",
    [
        window.Entry(1_000, 7).encode()[:16],  # a 16-byte entry: 0 repeats
        window.Entry(1_000, 7).encode(),
        window.Entry(1_714_564_800_000, 2**63, 41).encode(),
        window.Entry(1_000, 7, 0xFFFFFFFF).encode(),  # the count saturates
        window.Entry(1_000, 7, 3, b"\x01" * 8).encode(),  # with a content hash
    ],
)
def test_the_repeat_write_on_the_bytes_is_the_entrys(encoded: bytes) -> None:
    """The decision writes a repeat's entry from the held bytes; it must be the bytes
    ``Entry.repeated`` encodes, and read back the same sighting."""
    entry = window.Entry.decode(encoded)
    assert window.repeated_entry(encoded) == entry.repeated().encode()
    assert window.sighting_of(encoded) == (entry.first_seen_ms, entry.seq)


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


@pytest.mark.parametrize(
    ("bucket", "slot"),
    [(3_600_000, 225_000), (1_000, 50), (40, 2), (16, 1), (7, 7), (1, 1), (10, 10)],
)
def test_slots_tile_the_bucket(bucket: int, slot: int) -> None:
    assert window.slot_width(bucket) == slot
    assert bucket % slot == 0 and (slot == bucket or bucket // slot >= window.SLOTS_PER_BUCKET)


@pytest.mark.parametrize(
    ("stream", "lateness", "cutoff"),
    [
        (W + 1_000, 0, 1_000),  # bucket [0, 1000) ends exactly W before stream time: out
        (W + 999, 0, 0),
        (W + 1_000, 500, 0),  # kept for the allowed lateness
        (W + 1_500, 500, 1_000),
        (W + 2_999, 0, 2_000),  # a bucket at a time
        (W - 5, 0, 0),  # before the first window ends
    ],
)
def test_window_cutoff(stream: int, lateness: int, cutoff: int) -> None:
    assert window.window_cutoff(stream, W, lateness, 1_000) == cutoff


@pytest.mark.parametrize(("slot_ms", "block"), [(1, 1), (50, 7), (225_000, 78_125)])
def test_marks_of_many_entries_are_those_of_each(slot_ms: int, block: int) -> None:
    entries = [
        window.Entry(1_790_000_000_000 + 37 * i, 1_000 - i, i % 3).encode() for i in range(300)
    ]
    marks = window.marks_of(entries, slot_ms, block)
    assert marks is not None
    each = [window.Entry.decode(e) for e in entries]
    assert int.from_bytes(marks.top_seq, "big") == max(e.seq for e in each)
    assert int.from_bytes(marks.newest, "big") == max(e.first_seen_ms for e in each)
    ranks: dict[tuple[int, int], int] = {}
    for e in each:
        rank = (e.first_seen_ms - e.first_seen_ms % slot_ms, e.seq // block)
        ranks[rank] = ranks.get(rank, 0) + 1
    assert marks.ranks == ranks
    assert window.marks_of([entries[0], entries[1] + b"x"], slot_ms, block) is None  # lengths
    assert window.marks_of([], slot_ms, block) is None


U64 = st.integers(0, (1 << 64) - 1)


@settings(max_examples=300, deadline=None)
@given(
    sightings=st.lists(
        st.one_of(
            st.tuples(st.integers(1_790_000_000_000, 1_790_000_500_000), st.integers(0, 1 << 20)),
            st.tuples(U64, U64),  # ranks too far apart to number in 64 bits: the fallback
        ),
        min_size=1,
        max_size=60,
    ),
    slot_ms=st.sampled_from([1, 7, 1_000, 3_600_000]),
    block=st.sampled_from([1, 3, 1 << 15]),
    repeats=st.integers(0, 5),
)
def test_marks_of_any_entries_are_those_of_each(
    sightings: list[tuple[int, int]], slot_ms: int, block: int, repeats: int
) -> None:
    """Whole-array marks equal the per-entry definition (``rank_of``) for any 8-byte fields:
    ranks numbered in one array, or, when too far apart for 64 bits, counted as rows."""
    entries = [window.encode_entry(ms, seq, repeats) for ms, seq in sightings]
    marks = window.marks_of(entries, slot_ms, block)
    assert marks is not None
    ranks: dict[tuple[int, int], int] = {}
    for e in entries:
        rank = window.rank_of(e, slot_ms, block)
        ranks[rank] = ranks.get(rank, 0) + 1
    assert marks.ranks == ranks
    assert int.from_bytes(marks.top_seq, "big") == max(seq for _, seq in sightings)
    assert int.from_bytes(marks.newest, "big") == max(ms for ms, _ in sightings)


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


@pytest.mark.parametrize(
    ("cap", "block"),
    [(1, 1), (511, 1), (512, 2), (1_023, 2), (1_024, 4), (20_000_000, 65_536), (10**12, 2**31)],
)
def test_a_block_is_a_power_of_two_within_a_256th_of_the_cap(cap: int, block: int) -> None:
    assert window.block_size(cap) == block
    assert block * window.BLOCKS_PER_CAP <= max(cap, window.BLOCKS_PER_CAP)
    assert window.block_start(3 * block + block - 1, block) == 3 * block
