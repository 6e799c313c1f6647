"""Changing the window (and so the derived bucket) or the cap of a worker that already holds ids,
at a restart, without a wipe, on the real broker: a shorter window ages the excess out in
batches of ``DEDUPE_EVICTION_BATCH`` per record, judging each id by its own first sighting; a
longer one keeps every id held; a lower cap evicts down to 1% under it, oldest first."""

from __future__ import annotations

import signal

import pytest

from tables.window import slot_width
from tests.integration.test_age_out import T0, Send, feed, output, start, stats
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.integration


def restart(worker: Worker, **env: str) -> None:
    worker.kill(signal.SIGTERM)
    worker.extra_env = env
    worker.start()
    worker.wait_ready()


def test_a_shorter_window_ages_the_excess_out_promptly_in_bounded_batches(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    base = {"DEDUPE_ALLOWED_LATENESS": "0", "DEDUPE_EVICTION_BATCH": "8"}
    worker = start(broker, names, workers, DEDUPE_WINDOW="60s", **base)  # bucket 600 ms
    ids: list[Send] = [(f"s{t}-{i}", T0 + 1000 * t + i) for t in range(60) for i in range(20)]
    feed(broker, names, workers, ids)
    assert stats(worker)["ids_held"] == 1200
    restart(worker, DEDUPE_WINDOW="20s", **base)  # bucket 200 ms
    # Stream time 60 s: ids first seen before 40 s - 200 ms are out (s0..s39: 800 ids).
    feed(broker, names, workers, [("go", T0 + 60_000)] * 50)
    s = stats(worker)
    assert s["expired"] == 50 * 8  # 8 per record while the excess lasts
    feed(broker, names, workers, [("go", T0 + 60_000)] * 70)
    s = stats(worker)
    assert s["expired"] == 800 and s["evicted"] == 0
    assert s["ids_held"] == 400 + 1
    assert s["oldest_first_seen_ms"] == T0 + 40_000
    # Every id that may still be inside the new window is held: its copies (1 ms inside the
    # window of the oldest of them) are dropped; an aged-out one is forwarded again.
    before = len(output(broker, names.output_topic))
    feed(broker, names, workers, [(mid, T0 + 59_999) for mid, ts in ids if ts >= T0 + 40_000])
    feed(broker, names, workers, [("s0-0", T0 + 60_000)])
    out = output(broker, names.output_topic)
    assert [k for k, _ in out[before:]] == [b"s0-0"]


def test_a_longer_window_keeps_every_id_held(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    base = {"DEDUPE_ALLOWED_LATENESS": "0"}
    worker = start(broker, names, workers, DEDUPE_WINDOW="20s", **base)  # bucket 200 ms
    ids: list[Send] = [(f"s{t}-{i}", T0 + 1000 * t + i) for t in range(60) for i in range(10)]
    feed(broker, names, workers, ids)
    feed(broker, names, workers, [ids[-1]] * 100)  # age-out through the committed ids
    held_before = stats(worker)["ids_held"]
    assert 200 <= held_before <= 210  # 20 s of ids, plus at most one bucket
    restart(worker, DEDUPE_WINDOW="120s", **base)  # bucket 1.2 s
    later: list[Send] = [(f"n{t}", T0 + 1000 * t) for t in range(60, 101)]
    feed(broker, names, workers, later)
    feed(broker, names, workers, [later[-1]] * 100)
    s = stats(worker)
    assert s["expired"] == 0 and s["ids_held"] == held_before + len(later)
    # Every id held before the restart is a repeat still (within 120 s of its first sighting).
    kept = ids[-held_before:]
    before = len(output(broker, names.output_topic))
    feed(broker, names, workers, [(mid, T0 + 100_000) for mid, _ in kept])
    assert len(output(broker, names.output_topic)) == before


def test_a_lower_cap_evicts_down_to_it_oldest_first(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    base = {"DEDUPE_EVICTION_BATCH": "8", "DEDUPE_MIN_WINDOW": "0"}
    # Under a cap of 1,024 an entry keeps its sequence to a block of 4 (tables.window.block_size).
    worker = start(broker, names, workers, DEDUPE_MAX_IDS_PER_PARTITION="1024", **base)
    ids: list[Send] = [(f"c{i}", T0 + i) for i in range(500)]
    feed(broker, names, workers, ids)
    restart(worker, DEDUPE_MAX_IDS_PER_PARTITION="100", **base)
    feed(broker, names, workers, [("go", T0 + 1_000)] * 10)
    assert stats(worker)["evicted"] == 10 * 8
    feed(broker, names, workers, [("go", T0 + 1_000)] * 60)
    s = stats(worker)
    # The cap cuts to 99 or under (its 1% under it), oldest first, whole ranks: a block is one
    # id under a cap of 100, but the ids written before keep their blocks of 4, so it keeps
    # c404..c499 and "go" (97), not c402..c499.
    assert s["ids_held"] == 97 and s["evicted"] == 404
    slot = slot_width(3_600_000)  # of the default bucket: c404's slot is the oldest held
    assert s["oldest_first_seen_ms"] == T0 + 404 - (T0 + 404) % slot
