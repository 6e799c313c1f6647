"""``SeenIds.decide_span`` (the dedup loop's span of records in one call) against the reference
it replaces in that loop: ``decide`` then ``age_out``, a record at a time. On real RocksDB
stores, over streams that repeat ids, go back in time, fill a small size cap (evictions, sweeps)
and commit between spans: the same verdicts, the same staged writes in the same order (the
changelog), the same partition state, and the same ids and counts on disk after each commit.
The reference run checks the partition state's own invariant after each record, and the last
test the entry a re-armed repeat stores, which the two share."""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from tables.window import Entry, Verdict
from tests.unit.tables.seen_ids.support import WINDOW_MS, World

IDS = [f"id-{n}".encode() for n in range(24)]

#: One record: its id, and how far its time moves from the previous record's (back too).
RECORD = st.tuples(st.sampled_from(IDS), st.integers(-3 * WINDOW_MS // 10, WINDOW_MS // 2))


@st.composite
def streams(draw: st.DrawFn) -> tuple[dict[str, str], list[list[tuple[bytes, int]]]]:
    """Settings and the records in spans (:func:`run` commits after every other span, so a
    span starts in a fresh transaction or in the one before it)."""
    env = {
        "DEDUPE_MAX_IDS_PER_PARTITION": str(draw(st.sampled_from([4, 9, 1000]))),
        "DEDUPE_EVICTION_BATCH": str(draw(st.sampled_from([1, 64]))),
        "DEDUPE_COUNT_REPEATS": draw(st.sampled_from(["true", "false"])),
        "DEDUPE_WINDOW_FROM": draw(st.sampled_from(["first_seen", "last_seen"])),
    }
    t = 1_790_000_000_000
    spans = []
    for _ in range(draw(st.integers(1, 6))):
        span = []
        for id_, step in draw(st.lists(RECORD, min_size=1, max_size=25)):
            t = max(0, t + step)
            span.append((id_, t))
        spans.append(span)
    return env, spans


def state(world: World) -> tuple[Any, ...]:
    live = world.seen._live[0]
    return (
        live.cutoff,
        live.below,
        live.cursor,
        live.stream_ms,
        live.held_delta,
        live.next_seq,
        live.moved,
        dict(live.counts.delta),
        live.counts.delta_total,
        dict(world.seen.evicted),
        dict(world.seen.expired),
    )


async def run(
    tmp: Path, env: dict[str, str], spans: list[list[tuple[bytes, int]]], by_span: bool
) -> list[Any]:
    world = World(tmp, None, **env)  # type: ignore[arg-type]
    last_seen = env["DEDUPE_WINDOW_FROM"] == "last_seen"
    seen = world.seen
    trail: list[Any] = []
    try:
        for n, span in enumerate(spans):
            if by_span:
                ids, times = [i for i, _ in span], [t for _, t in span]
                verdicts = seen.decide_span(ids, times, 0, last_seen)
            else:
                verdicts = []
                for id_, t in span:
                    verdicts.append(seen.decide(id_, t, 0, b"", last_seen))
                    seen.age_out(t, 0)
                    # What the sweep still has to delete is what the counts hold below the
                    # cutoff, after every record.
                    live = seen._live[0]
                    assert live.below == live.counts.below(live.cutoff)
            trail.append((verdicts, list(world.table.changelog), state(world)))
            world.table.changelog.clear()
            if n % 2 == 0:
                world.commit()
                trail.append((world.ids(), world.counts()))
    finally:
        for store in world.stores:
            await store.on_stop()
    return trail


@settings(max_examples=60, deadline=None)
@given(streams())
def test_a_span_decides_and_ages_out_as_a_record_at_a_time(
    stream: tuple[dict[str, str], list[list[tuple[bytes, int]]]],
) -> None:
    env, spans = stream
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        reference = asyncio.run(run(Path(a), env, spans, by_span=False))
        spanned = asyncio.run(run(Path(b), env, spans, by_span=True))
    assert spanned == reference


def test_the_stream_property_reaches_every_verdict_and_evictions() -> None:
    """The property above is only as good as its streams: one of them, run here, repeats,
    re-arms, ages out and evicts (a guard against a strategy that stopped reaching them)."""
    env = {
        "DEDUPE_MAX_IDS_PER_PARTITION": "4",
        "DEDUPE_EVICTION_BATCH": "1",
        "DEDUPE_COUNT_REPEATS": "true",
        "DEDUPE_WINDOW_FROM": "last_seen",
    }
    t = 1_790_000_000_000
    ids = [b"a", b"b", b"a", b"c", b"d", b"e", b"f", b"a", b"b"]
    first = [(id_, t + 100 * n) for n, id_ in enumerate(ids)]  # committed after
    second = [(b"g", t + 1000), (b"a", t + 3 * WINDOW_MS), (b"h", t + 3 * WINDOW_MS)]
    with tempfile.TemporaryDirectory() as tmp:
        trail = asyncio.run(run(Path(tmp), env, [first, second], by_span=True))
    verdicts, _, _ = trail[0]
    assert verdicts[:3] == [Verdict.FIRST, Verdict.FIRST, Verdict.REPEAT]
    verdicts, changelog, live = trail[2]
    assert verdicts[1] is Verdict.FIRST  # past the window: a new first sighting
    assert any(value is None for _, _, value in changelog)  # the sweep deleted ids
    assert live[-2] and live[-1]  # evicted and expired, counted


def test_a_re_armed_repeat_keeps_the_held_content(world: World) -> None:
    """Under last_seen a repeat stores its id again with its own time but the forwarded copy's
    content hash, whatever hash (none here) the repeat came with."""
    t = 1_790_000_000_000
    seen = world.seen
    assert seen.decide(b"x", t, 0, b"h1", last_seen=True) is Verdict.FIRST
    assert seen.decide(b"x", t + 5, 0, b"", last_seen=True) is Verdict.REPEAT
    stored = world.table.changelog[-1]
    assert stored[1] == b"x" and Entry.decode(stored[2]) == Entry(t + 5, 0, 0, b"h1")
