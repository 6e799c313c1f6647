"""Age-out in ``tables.seen_ids`` on a real RocksDB store: window, size cap (oldest first), seek
hint, effective window, and a discarded transaction leaving no trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tables import window
from tests.unit.seen_ids.support import BUCKET_MS, WINDOW_MS, World


def test_repeats_inside_the_window_are_dropped_and_after_it_forwarded(world: World) -> None:
    assert world.record("a", 1_000)
    assert not world.record("a", 1_000 + WINDOW_MS - 1)
    world.commit()
    assert world.record("a", 1_000 + WINDOW_MS)  # W is outside: a new first sighting
    world.commit()
    assert world.ids()[b"a"].first_seen_ms == 1_000 + WINDOW_MS
    assert len(world.index()) == 1  # the old index entry went with the re-insert


def test_a_counted_repeat_keeps_its_one_index_entry_and_the_summary(world: World) -> None:
    assert world.record("a", 1_000)
    assert not world.record("a", 1_001)  # the first sighting and its repeat in one commit
    world.commit()
    index, summary = world.index(), world.store.summary(0)
    assert not world.record("a", 1_002)  # a repeat of a committed id
    assert not world.record("a", 1_003)
    world.commit()
    assert world.ids()[b"a"].repeats == 3
    assert world.index() == index and len(index) == 1
    assert world.store.summary(0) == summary and summary.held == 1


def test_expired_buckets_are_removed_with_tombstones_and_counted(world: World) -> None:
    for i in range(20):
        assert world.record(f"old-{i}", 500 + i)  # bucket [0, 1000)
    world.commit()
    assert world.store.summary(0).held == 20
    # stream time moves past the bucket's end + W: the next records age it out in batches
    world.record("new-0", BUCKET_MS + WINDOW_MS)
    for i in range(1, 5):
        world.record(f"new-{i}", BUCKET_MS + WINDOW_MS + i)
    world.commit()
    assert set(world.ids()) == {f"new-{i}".encode() for i in range(5)}
    assert world.store.summary(0).held == 5
    tombstones = [k for _, k, v in world.table.changelog if v is None]
    assert sorted(tombstones) == sorted(f"old-{i}".encode() for i in range(20))
    assert world.seen.expired[0] == 20 and not world.seen.evicted.get(0)


async def test_size_cap_evicts_oldest_first_and_reports_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, monkeypatch, DEDUPE_MAX_IDS_PER_PARTITION="10", DEDUPE_EVICTION_BATCH="2")
    try:
        for i in range(30):
            assert w.record(f"id-{i:02d}", 1_000 + 100 * i)  # 10 per second, inside the window
            w.commit()
        held = w.ids()
        assert sorted(held) == [f"id-{i:02d}".encode() for i in range(20, 30)]
        assert w.store.summary(0).held == 10
        assert w.seen.evicted[0] == 20
        # the oldest held was first seen at 1000 + 100*20; seen from the last record (3900):
        assert w.seen.effective_window_ms(0, 1_000 + 100 * 29) == 900
        # an evicted id is forwarded again; a held one is not
        assert w.record("id-05", 5_000)
        assert not w.record("id-25", 5_000)
    finally:
        for store in w.stores:
            await store.on_stop()


def test_the_seek_hint_skips_what_was_deleted(world: World) -> None:
    for i in range(10):
        world.record(f"x{i}", 100 + i)
    world.commit()
    world.record("late", 2 * BUCKET_MS + WINDOW_MS)  # ages out bucket 0
    world.commit()
    hint = world.store.summary(0).hint
    assert hint > window.index_key(109, BUCKET_MS, 9)  # past every deleted key
    assert all(k >= hint for k in world.index())


def test_a_late_first_sighting_below_the_hint_lowers_it(world: World) -> None:
    for i in range(5):
        world.record(f"x{i}", 100 + i)  # bucket 0
        world.record(f"y{i}", 1_100 + i)  # bucket 1
    world.commit()
    world.record("move", 3 * BUCKET_MS + WINDOW_MS)  # buckets 0..2 are out of the window
    world.commit()
    before = world.store.summary(0).hint
    assert before > window.index_key(1_104, BUCKET_MS, 9)
    late_key = window.index_key(600, BUCKET_MS, world.store.summary(0).next_seq)
    assert late_key < before
    assert world.record("late", 600)  # a first sighting in an old bucket (a late record)
    world.commit()
    assert world.store.summary(0).hint <= late_key  # so age-out will find it
    world.record("next", 3 * BUCKET_MS + WINDOW_MS + 1)
    world.commit()
    assert b"late" not in world.ids()


def test_a_discarded_transaction_leaves_no_trace(world: World) -> None:
    world.record("kept", 100)
    world.commit()
    world.record("dropped", 200)
    world.store.discard_partition(0)
    world.seen.discard_partition(0)
    assert set(world.ids()) == {b"kept"}
    assert world.store.summary(0).held == 1
    assert world.record("dropped", 300)  # never remembered: a first sighting again
