"""``DEDUPE_WINDOW_FROM``: whether a repeat re-arms an id's clock (``tables.window.rearms``), on
a real RocksDB store (the id's count moves to its new slot, and a rebuild from the changelog
agrees), and per source through the deduplicator."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from app.settings import Settings
from app.worker.dedup import RecordOutcome
from tables import window
from tables.seen_ids import SeenIds
from tests.unit.app.worker.test_dedup_strategies import ev, rec, run, settings
from tests.unit.tables.seen_ids.support import BUCKET_MS, WINDOW_MS, World

DAY = 86_400_000


@pytest.mark.parametrize(
    ("armed", "record_ms", "last_seen", "moves"),
    [
        (1_000, 1_001, True, True),
        (1_000, 1_000, True, False),  # the same time: nothing to move
        (1_000, 999, True, False),  # out of order: never shortens the id's life
        (1_000, 5_000, False, False),  # first_seen: a repeat never moves the clock
    ],
)
def test_rearms(armed: int, record_ms: int, last_seen: bool, moves: bool) -> None:
    assert window.rearms(armed, record_ms, last_seen) is moves


class ArmedWorld(World):
    def record_from(self, id_: str, t: int, last_seen: bool) -> bool:
        verdict = self.seen.decide(id_.encode(), t, self.table.partition, last_seen=last_seen)
        self.age_out(t)
        return verdict is window.Verdict.FIRST


@pytest.fixture(params=[False, True], ids=["uncounted", "counted"])
async def w(  # type: ignore[no-untyped-def]
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
):
    """A world with DEDUPE_COUNT_REPEATS off (the default) and on: a re-arm writes the entry
    either way, and counts the repeat only when on."""
    world = ArmedWorld(tmp_path, monkeypatch, DEDUPE_COUNT_REPEATS=str(request.param).lower())
    yield world
    for store in world.stores:
        await store.on_stop()


@pytest.mark.parametrize("last_seen", [False, True])
def test_a_repeat_keeps_the_id_alive_only_under_last_seen(w: ArmedWorld, last_seen: bool) -> None:
    step = WINDOW_MS // 2
    assert w.record_from("a", 1_000, last_seen)
    w.commit()
    for n in range(1, 5):  # a repeat every half window: each inside the last one's window
        first = w.record_from("a", 1_000 + n * step, last_seen)
        w.commit()
        # first_seen: the copy at 1000 + W starts a new window (forwarded); last_seen: never
        assert first is (not last_seen and n in (2, 4))
    entry = w.ids()[b"a"]
    assert entry.first_seen_ms == (1_000 + 4 * step)
    # first_seen: the copy at n=4 was a new first sighting (repeats start again at 0)
    assert entry.repeats == (4 if last_seen and w.seen.count_repeats else 0)
    assert w.counts() == {w.rank(entry.first_seen_ms, entry.seq): 1}  # one id, in the armed slot
    assert w.store.summary(0).held == 1


def test_a_rearmed_id_ages_out_a_window_after_its_last_sighting(w: ArmedWorld) -> None:
    w.record_from("a", 1_000, True)
    w.record_from("b", 1_000, True)
    w.commit()
    assert not w.record_from("a", 8_000, True)  # a repeat: a's clock moves to 8000
    w.commit()
    # Stream time past b's bucket + W: b goes, a (armed at 8000) stays.
    w.record_from("c", 2 * BUCKET_MS + WINDOW_MS, True)
    w.commit()
    assert set(w.ids()) == {b"a", b"c"}
    assert not w.record_from("a", 8_000 + WINDOW_MS - 1, True)
    w.commit()
    assert w.ids()[b"a"].first_seen_ms == 8_000 + WINDOW_MS - 1
    # A window after the last sighting, a copy is a new first sighting.
    assert w.record_from("a", 8_000 + 2 * WINDOW_MS - 1, True)
    w.commit()


def test_rearmed_ids_rebuilt_from_the_changelog_give_the_same_state(w: ArmedWorld) -> None:
    for i in range(60):
        w.record_from(f"id-{i}", 300 * i, True)
        if i % 3 == 0:
            w.record_from(f"id-{i // 2}", 300 * i, True)  # repeats, most re-arming
        w.commit()
    replica = w.new_store("seen_ids_replica")

    class Msg:
        def __init__(self, offset: int, key: bytes, value: bytes | None) -> None:
            self.partition, self.offset, self.key, self.value = 0, offset, key, value

    events = [
        types.SimpleNamespace(message=Msg(n, k, v)) for n, (_, k, v) in enumerate(w.table.changelog)
    ]
    for start in range(0, len(events), 11):
        replica.apply_changelog_batch(events[start : start + 11], None, None)  # type: ignore[arg-type]
    assert w.ids(replica) == w.ids()
    assert w.counts(replica) == w.counts()
    assert sum(w.counts().values()) == len(w.ids())  # exact: every id held counted once
    live, rebuilt = w.store.summary(0), replica.summary(0)
    assert (rebuilt.held, rebuilt.next_seq, rebuilt.newest_ms) == (
        live.held,
        live.next_seq,
        live.newest_ms,
    )
    # Ids whose clock a later copy moved (re-armed, or forwarded again past the window); only
    # a re-arm counts a repeat, and only when repeats are counted.
    moved = {k for k, e in w.ids().items() if e.first_seen_ms != 300 * int(k[3:])}
    counted = {k for k, e in w.ids().items() if e.repeats}
    assert moved and counted <= moved
    assert bool(counted) is w.seen.count_repeats


async def test_window_from_per_source() -> None:
    poller, web = [("dedupe.source", b"poller")], [("dedupe.source", b"web")]
    s = settings(source_window_from="poller=last_seen")
    t0 = 1_790_000_000_000
    body = ev(messageId="m-1")
    for headers, expected in [
        (poller, [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.DUPLICATE]),
        (web, [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.FORWARDED]),
    ]:
        msgs = [rec(b"m-1", body, headers, timestamp=t0 + d * DAY) for d in (0, 20, 40)]
        outcomes, *_ = await run(s, *msgs)
        assert outcomes == expected, headers
    # The default applies to every source without an entry of its own.
    msgs = [rec(b"m-1", body, web, timestamp=t0 + d * DAY) for d in (0, 20, 40)]
    outcomes, *_ = await run(settings(window_from="last_seen"), *msgs)
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.DUPLICATE]


def restart_with(w: ArmedWorld, **env: str) -> None:
    """What a restart with other window settings changes: the slot width and block size the
    store counts with (it counts the ids again when it opens the partition) and the rules
    SeenIds applies; the persisted ids and cutoff stay as written."""
    settings = Settings.from_env({"DEDUPE_ALLOWED_LATENESS": "0", "DEDUPE_MIN_WINDOW": "0", **env})
    w.store.bucket_ms = round(settings.bucket * 1000)
    w.store.slot_ms = window.slot_width(w.store.bucket_ms)
    w.store.block = window.block_size(settings.max_ids_per_partition)
    w.store.close_partition(0)
    w.seen = SeenIds(w.table, settings)  # type: ignore[arg-type]


def test_a_shorter_window_judges_old_entries_by_their_own_time_not_the_old_bucket(
    w: ArmedWorld,
) -> None:
    for i in range(20):  # 0 .. 1900 ms, in the 1 s buckets [0, 1000) and [1000, 2000)
        w.record_from(f"a{i}", 100 * i, False)
    w.commit()
    restart_with(w, DEDUPE_WINDOW="4s")  # derived bucket: 40 ms
    assert w.record_from("z", 4_100, False)
    w.commit()
    # Out of a 4 s window at 4100: only a0 (its 40 ms bucket ends at 40 <= 100). By the old
    # 1 s bucket's start (0) a1..a9 would have gone too, though 4100 - 900 < 4 s.
    assert set(w.ids()) == {f"a{i}".encode() for i in range(1, 20)} | {b"z"}
    assert not w.record_from("a9", 4_100, False)  # still a repeat
    w.record_from("y", 6_000, False)  # stream time 6 s: a0..a19 (f < 2000) are out
    w.commit()
    assert set(w.ids()) == {b"z", b"y"}
    # Counted again under the new width: every id held once, none left behind.
    assert sum(w.counts().values()) == len(w.ids()) == w.store.summary(0).held


def test_a_longer_window_keeps_every_id_held(w: ArmedWorld) -> None:
    for i in range(20):
        w.record_from(f"a{i}", 100 * i, False)
    w.commit()
    restart_with(w, DEDUPE_WINDOW="40s")  # derived bucket: 400 ms
    for n in range(50):  # records well past the old window, inside the new one
        w.record_from(f"b{n}", 20_000 + n, False)
        w.commit()
    assert {f"a{i}".encode() for i in range(20)} <= set(w.ids())
    assert not w.record_from("a13", 41_299, False)  # 40 s after a13 less 1 ms: a repeat
    assert w.record_from("a13", 41_300, False)  # W itself is outside
    w.commit()
    w.record_from("c", 100_000, False)
    w.commit()
    assert sum(w.counts().values()) == len(w.ids()) == w.store.summary(0).held


def test_a_lower_cap_evicts_the_excess_in_bounded_batches(w: ArmedWorld) -> None:
    for i in range(100):
        w.record_from(f"a{i:02d}", 1_000 + 10 * i, False)
    w.commit()
    restart_with(
        w,
        DEDUPE_WINDOW=f"{WINDOW_MS}ms",
        DEDUPE_BUCKET=f"{BUCKET_MS}ms",
        DEDUPE_MAX_IDS_PER_PARTITION="40",
        DEDUPE_EVICTION_BATCH="8",
    )
    held = []
    for n in range(10):
        w.record_from(f"b{n}", 2_000 + n, False)
        w.commit()
        held.append(w.store.summary(0).held)
    # Each record evicts at most 8 (the batch): 100 + 1 - 8 = 93, ... down to what the cap keeps.
    assert held[:3] == [93, 86, 79]
    assert held[-1] == 40
    # Under a cap of 40 a block is one sequence number: the cap cuts exactly, oldest first.
    assert sorted(k for k in w.ids() if k.startswith(b"a")) == [
        f"a{i:02d}".encode() for i in range(70, 100)
    ]


def test_another_bucket_keeps_every_id_the_cutoff_left_in(w: ArmedWorld) -> None:
    """The cutoff is kept across a restart with another bucket, moved onto the new slots'
    grid: down, so an id it left in stays held although its new slot starts before it."""
    w.record_from("old", 100, False)
    w.record_from("kept", 2_010, False)
    w.record_from("move", 2 * BUCKET_MS + WINDOW_MS, False)  # the cutoff: 2000
    w.commit()
    assert w.store.summary(0).cutoff == (2_000, 0)
    restart_with(w, DEDUPE_WINDOW=f"{WINDOW_MS}ms", DEDUPE_BUCKET="1200ms")  # slots of 75 ms
    assert w.store.summary(0).cutoff == (2_000 - 2_000 % 75, 0)  # 1950, kept's new slot
    assert not w.record_from("kept", 2 * BUCKET_MS + WINDOW_MS + 1, False)  # still a repeat
    w.commit()
    assert set(w.ids()) == {b"kept", b"move"}
