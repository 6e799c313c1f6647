"""Faust's sensors on the worker: the Monitor is off the hot path, and a rebalance logs no
"Missing sensor state" warning (Faust takes an empty sensor state for a lost one)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from app.settings import Settings
from app.worker import metrics
from app.worker.factory import create_app


async def test_a_rebalance_logs_no_missing_sensor_state_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(Settings.from_env({"DEDUPE_DATA_DIR": str(tmp_path)})).app
    app.on_init_dependencies()
    assert app.monitor not in set(app.sensors)
    timed = metrics.REGISTRY.get_sample_value("dedupe_rebalance_seconds_count") or 0.0
    caplog.set_level(logging.INFO)
    for _ in range(2):  # the first rebalance at start-up, and a later one
        app.on_rebalance_start()
        app.on_rebalance_return()
        app.on_rebalance_end()
    assert app.rebalancing_count == 2
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == []
    assert metrics.REGISTRY.get_sample_value("dedupe_rebalance_seconds_count") == timed + 2


def test_the_sensor_is_added_once(tmp_path: Path) -> None:
    app = create_app(Settings.from_env({"DEDUPE_DATA_DIR": str(tmp_path)})).app
    app.on_init_dependencies()
    app.on_init_dependencies()
    assert [type(s).__name__ for s in app.sensors] == ["RebalanceSensor"]
