"""Age-out in ``tables.seen_ids`` on a real RocksDB store: window, size cap (oldest first), the
cutoff that makes an id absent before the sweep deletes it, the sweep's cursor, the effective
window, and a discarded transaction leaving no trace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tables import window
from tests.unit.tables.seen_ids.support import BUCKET_MS, WINDOW_MS, World


def test_repeats_inside_the_window_are_dropped_and_after_it_forwarded(world: World) -> None:
    assert world.record("a", 1_000)
    assert not world.record("a", 1_000 + WINDOW_MS - 1)
    world.commit()
    assert world.record("a", 1_000 + WINDOW_MS)  # W is outside: a new first sighting
    world.commit()
    assert world.ids()[b"a"].first_seen_ms == 1_000 + WINDOW_MS
    # the old entry's count went with the re-insert
    assert world.counts() == {world.rank(1_000 + WINDOW_MS, 1): 1}


async def test_a_counted_repeat_keeps_its_one_count_and_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    world = World(tmp_path, monkeypatch, DEDUPE_COUNT_REPEATS="true")
    try:
        assert world.record("a", 1_000)
        assert not world.record("a", 1_001)  # the first sighting and its repeat in one commit
        world.commit()
        counts, summary = world.counts(), world.store.summary(0)
        world.table.changelog.clear()
        assert not world.record("a", 1_002)  # a repeat of a committed id
        assert not world.record("a", 1_003)
        assert [key for _, key, _ in world.table.changelog] == [b"a", b"a"]
        world.commit()
        assert world.ids()[b"a"].repeats == 3
        assert world.counts() == counts == {world.rank(1_000, 0): 1}
        assert world.store.summary(0) == summary and summary.held == 1
    finally:
        for store in world.stores:
            await store.on_stop()


def test_an_uncounted_repeat_writes_nothing(world: World) -> None:
    """The default (DEDUPE_COUNT_REPEATS off): a repeat stages no write, so it sends no
    changelog record and its transaction's commit writes nothing for it."""
    assert world.record("a", 1_000)
    assert not world.record("a", 1_001)  # a repeat of the open transaction's first sighting
    assert [key for _, key, _ in world.table.changelog] == [b"a"]
    world.commit()
    world.table.changelog.clear()
    held = world.ids()[b"a"]
    counts, summary = world.counts(), world.store.summary(0)
    assert not world.record("a", 1_002)  # a repeat of a committed id
    assert world.table.changelog == [] and world.store.staged_count(0) == 0
    world.commit()
    assert world.ids()[b"a"] == held and held.repeats == 0
    assert world.counts() == counts == {world.rank(1_000, 0): 1}
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
        # the oldest held was first seen at 1000 + 100*20, in the slot starting at w.slot(3000);
        # seen from the last record (3900):
        assert w.seen.effective_window_ms(0, 1_000 + 100 * 29) == 3_900 - w.slot(3_000)
        # an evicted id is forwarded again; a held one is not
        assert w.record("id-05", 5_000)
        assert not w.record("id-25", 5_000)
    finally:
        for store in w.stores:
            await store.on_stop()


def test_the_sweep_goes_on_from_its_cursor_and_stops_once_none_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, monkeypatch, DEDUPE_EVICTION_BATCH="2")
    for i in range(20):
        w.record(f"x{i:02d}", 100 + i)  # slot 0, bucket 0
    w.commit()
    w.record("move", 2 * BUCKET_MS + WINDOW_MS)  # bucket 0 is out of the window
    w.commit()
    assert w.store.summary(0).cutoff == (2 * BUCKET_MS, 0)
    assert len(w.ids()) == 19  # two deleted, the rest wait below the cutoff
    cursors = [w.store.summary(0).cursor]
    for t in range(1, 10):  # at most two deletions per record, each from where the last ended
        w.record(f"n{t}", 2 * BUCKET_MS + WINDOW_MS + t)
        w.commit()
        cursors.append(w.store.summary(0).cursor)
    assert [k for k in w.ids() if k.startswith(b"x")] == []
    assert w.seen.expired[0] == 20
    assert cursors[:9] == sorted(cursors[:9]) and len(set(cursors[:9])) == 9
    # nothing waits below the cutoff: the sweep does not run, its cursor stays put
    last = w.store.summary(0).cursor
    w.record("after", 2 * BUCKET_MS + WINDOW_MS + 20)
    w.commit()
    assert w.store.summary(0).cursor == last


def test_an_id_below_the_cutoff_is_absent_before_the_sweep_reaches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A decision depends on the ids held and the cutoff, not on how far the sweep got: with
    one deletion per record or sixty-four, every verdict is the same."""
    verdicts = []
    for batch in ("1", "64"):
        w = World(tmp_path / batch, monkeypatch, DEDUPE_EVICTION_BATCH=batch)
        got = []
        for i in range(30):
            got.append(w.record(f"x{i}", 100 + i))
        w.commit()
        got.append(w.record("move", 2 * BUCKET_MS + WINDOW_MS))
        w.commit()
        # Records later than the allowed lateness (0 here), inside the window of their first
        # sightings: below the cutoff, so first sightings again, swept or not.
        for i in range(30):
            got.append(w.record(f"x{i}", 5_000 + i))
            w.commit()
        verdicts.append(got)
    assert verdicts[0] == verdicts[1]
    assert verdicts[0][-30:] == [True] * 30


def test_a_late_first_sighting_below_the_cutoff_is_swept(world: World) -> None:
    for i in range(5):
        world.record(f"x{i}", 100 + i)  # bucket 0
        world.record(f"y{i}", 1_100 + i)  # bucket 1
    world.commit()
    world.record("move", 3 * BUCKET_MS + WINDOW_MS)  # buckets 0..2 are out of the window
    world.commit()
    assert set(world.ids()) == {b"move"}
    assert world.record("late", 600)  # a first sighting in an old bucket (a late record)
    world.commit()
    # written, and absent: the sweep leaves what its own transaction wrote to the next one
    assert b"late" in world.ids()
    assert world.record("late", 601)
    world.commit()
    world.record("next", 3 * BUCKET_MS + WINDOW_MS + 1)
    world.commit()
    assert set(world.ids()) == {b"move", b"next"}
    assert world.counts() == {world.rank(3 * BUCKET_MS + WINDOW_MS, 0): 2}


def test_a_discarded_transaction_leaves_no_trace(world: World) -> None:
    world.record("kept", 100)
    world.commit()
    world.record("dropped", 200)
    world.store.discard_partition(0)
    world.seen.discard_partition(0)
    assert set(world.ids()) == {b"kept"}
    assert world.store.summary(0).held == 1
    assert world.record("dropped", 300)  # never remembered: a first sighting again


async def test_a_partition_reopened_after_a_rebalance_is_judged_on_what_it_holds_now(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition revoked and assigned again may come back with what another worker wrote
    (restored from the changelog): the decision reads its counts again, not the ones it kept."""
    w = World(tmp_path, monkeypatch, DEDUPE_MAX_IDS_PER_PARTITION="2")
    try:
        assert w.record("a", 1_000)
        w.commit()
        w.store.close_partition(0)  # revoked; another worker forwarded "b", restored here
        w.store.write_partition(0, [(b"b", window.encode_entry(2_000, 1))], 7)
        assert not w.record("b", 2_001)  # a repeat of the restored id
        assert w.record("c", 3_000)  # three ids: over the cap of 2, "a" (the oldest) is cut
        w.commit()
        assert w.record("a", 3_001)  # so forwarded again
        assert w.seen.evicted[0] >= 1
    finally:
        for store in w.stores:
            await store.on_stop()


async def test_ids_restored_as_a_standby_are_counted_when_the_partition_is_active_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A partition that went to another worker and stayed here as a standby (its database open)
    takes that worker's changelog records: the decision reads its state again when it is
    active here again, so the sweep does not look for ids the other worker deleted."""
    w = World(tmp_path, monkeypatch, DEDUPE_EVICTION_BATCH="2")
    try:
        for i in range(10):
            w.record(f"x{i}", 100 + i)
        w.commit()
        w.record("move", 2 * BUCKET_MS + WINDOW_MS)  # ten ids below the cutoff, two deleted
        w.commit()
        left = [k for k in w.ids() if k.startswith(b"x")]
        assert len(left) == 8
        # A standby now: the active worker's sweep deletes the rest (its changelog records).
        w.store.write_restored(0, [(k, None) for k in left], 50, wal=True)
        assert w.record("n", 2 * BUCKET_MS + WINDOW_MS + 1)  # active here again
        w.commit()
        assert w.seen.status(0)["ids_held"] == 2 == len(w.ids())
        assert w.seen._live[0].below == 0
    finally:
        for store in w.stores:
            await store.on_stop()
