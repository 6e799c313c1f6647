"""The window forecast: the pure rule (tables/window_forecast.py) and the worker's watch over a
real store (app/worker/window_watch.py), at start-up (from the restored index) and as records
flow."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.worker.window_watch import WindowWatch
from tables.seen_ids import SeenIds
from tables.window_forecast import (
    MIN_SPAN_MS,
    RECENT_HORIZON_MS,
    RecentRate,
    forecast,
    held_rate,
)
from tests.unit.tables.seen_ids.support import World

HOUR_MS = 3_600_000


def test_the_rate_over_the_ids_held_needs_a_minute_of_record_time() -> None:
    assert held_rate(6_000, 0, 60_000) == 100.0
    assert held_rate(6_000, 1, 60_000) is None  # under a minute
    assert held_rate(6_000, None, 60_000) is None  # oldest unknown
    assert held_rate(0, 0, 600_000) is None


def test_the_recent_rate_covers_the_horizon_and_restarts_when_the_counts_go_back() -> None:
    r = RecentRate()
    r.observe(0, 0)
    assert r.rate() is None
    r.observe(MIN_SPAN_MS - 1, 10)
    assert r.rate() is None
    r.observe(MIN_SPAN_MS, 600)
    assert r.rate() == 10.0
    # 30 minutes at 10/s, then 5 minutes at 100/s: only the last 15 minutes count
    t, n = MIN_SPAN_MS, 600
    for _ in range(29):
        t, n = t + 60_000, n + 600
        r.observe(t, n)
    for _ in range(5):
        t, n = t + 60_000, n + 6_000
        r.observe(t, n)
    assert r.samples[0][0] == t - RECENT_HORIZON_MS
    assert r.rate() == (10 * 600 + 5 * 6_000) / (15 * 60)
    r.observe(t + 60_000, 5)  # counters restarted (state rebuilt)
    assert list(r.samples) == [(t + 60_000, 5)] and r.rate() is None


def test_the_forecast_warns_when_the_cap_fills_sooner_than_the_minimum_window() -> None:
    # 100 ids/s into a cap of 180,000 ids: 30 minutes, under a 1 h minimum
    f = forecast(3, 100.0, None, 180_000, HOUR_MS)
    assert f.predicted_window_ms == HOUR_MS // 2
    assert f.warning is not None and f.warning.startswith("partition 3: at 100.0 new ids/s")
    assert "DEDUPE_MAX_IDS_PER_PARTITION=180000" in f.warning and "0.50 h" in f.warning
    # the cap holds exactly the minimum: no warning
    assert forecast(3, 50.0, None, 180_000, HOUR_MS).warning is None
    # the higher of the two rates counts
    assert forecast(3, 10.0, 100.0, 180_000, HOUR_MS).predicted_window_ms == HOUR_MS // 2
    assert forecast(3, 100.0, 10.0, 180_000, HOUR_MS).predicted_window_ms == HOUR_MS // 2
    none = forecast(3, None, None, 180_000, HOUR_MS)
    assert none.predicted_window_ms is None and none.warning is None
    assert none.as_dict()["new_ids_per_second_held"] is None


async def test_the_watch_warns_at_start_up_from_the_restored_state(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"DEDUPE_MAX_IDS_PER_PARTITION": "10000", "DEDUPE_MIN_WINDOW": "1h"}
    w = World(tmp_path, monkeypatch, DEDUPE_WINDOW="1d", DEDUPE_BUCKET="1m", **env)
    try:
        # 2,000 ids over 200 s of record time, 10 per second: a 10,000-id cap fills in 1,000 s
        for i in range(2_000):
            w.record(f"id-{i}", 1_000_000 + 100 * i)
        w.commit()
        # A worker started on this state: nothing processed yet, nothing scanned.
        restarted = SeenIds(w.table, w.settings)  # type: ignore[arg-type]
        watch = WindowWatch(restarted)
        assert restarted.status(0)["oldest_first_seen_ms"] is None
        with caplog.at_level(logging.WARNING, logger="app.worker.window_watch"):
            watch.check([0])
        f = watch.forecast(0)
        assert f.held_rate == pytest.approx(2_000 / 199.9)
        assert f.predicted_window_ms == pytest.approx(999_500, abs=1)
        assert f.warning is not None
        assert [r.getMessage() for r in caplog.records] == [f.warning]
        watch.check([0])  # still short: not repeated within the hour
        assert len(caplog.records) == 1
    finally:
        for store in w.stores:
            await store.on_stop()


async def test_the_watch_stays_quiet_while_the_cap_keeps_the_minimum(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    env = {"DEDUPE_MAX_IDS_PER_PARTITION": "40000", "DEDUPE_MIN_WINDOW": "1h"}
    w = World(tmp_path, monkeypatch, DEDUPE_WINDOW="1d", DEDUPE_BUCKET="1m", **env)
    try:
        # 1 id per second: the cap holds 40,000 s, over the hour
        for i in range(600):
            w.record(f"id-{i}", 1_000_000 + 1_000 * i)
        w.commit()
        watch = WindowWatch(w.seen)
        with caplog.at_level(logging.WARNING, logger="app.worker.window_watch"):
            watch.check([0])
        f = watch.forecast(0)
        assert f.held_rate == pytest.approx(600 / 599) and f.warning is None
        assert not caplog.records
        # The rate rises to 20/s for two minutes: the recent rate sees it, the held one lags.
        t = 1_000_000 + 1_000 * 600
        for i in range(2_400):
            w.record(f"fast-{i}", t + 50 * i)
            if i % 200 == 199:
                w.commit()
                watch.check([0])
        f = watch.forecast(0)
        assert f.recent_rate is not None and f.recent_rate > 15
        # 3,000 ids over 720 s: the held rate alone (4.2/s) leaves 2.7 h, no warning ...
        assert f.held_rate is not None and f.held_rate < 5
        assert forecast(0, f.held_rate, None, 40_000, HOUR_MS).warning is None
        # ... the recent one (20/s) leaves 2,000 s
        assert f.warning is not None and len(caplog.records) == 1
    finally:
        for store in w.stores:
            await store.on_stop()
