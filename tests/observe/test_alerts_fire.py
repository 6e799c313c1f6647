"""A real Prometheus (Debian's package) scrapes two real workers every second and evaluates
deploy/prometheus/alerts.yml as shipped. One worker is killed (kill -9) and the other stopped
(SIGSTOP: a frozen process whose port still accepts connections): DedupeWorkerDown goes pending,
then fires for both after its ``for`` of one minute; the killed worker is started again and the
stopped one continued, and the alert clears. Before the faults, the series the rules read are
there under the names the rules use, and every query of the Grafana dashboard
(deploy/grafana/dedupe.json) runs.

How to run: ``make test-observe`` (a broker on the tier's port, Prometheus on 19490).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts import grafana_dashboard
from tests.observe.prometheus import Prometheus
from tests.support import Broker, Names
from tests.workers import Worker

ALERT = "DedupeWorkerDown"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[list[Worker]], Prometheus]]:
    started: list[Prometheus] = []

    def start(workers: list[Worker]) -> Prometheus:
        targets = [f"127.0.0.1:{w.web_port}" for w in workers]
        p = Prometheus(tmp_path / "prometheus", {"dedupe-worker": targets})
        started.append(p)
        p.start()
        return p

    yield start
    for p in started:
        p.stop()


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float:
    """Seconds until ``check()`` held; fails after ``timeout``."""
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < timeout, f"not within {timeout:.0f}s: {what}"
        time.sleep(0.5)
    return time.monotonic() - started


#: Dashboard panels whose queries have series as soon as workers run, before any record.
ALWAYS_THERE = {
    "Forwarded (first sightings) per second",
    "Consumer lag per partition",
    "Commits per second",
    "Ids held per partition",
    "Data dir free",
    "Workers up",
    # Exported at 0 from the start (app/worker/metrics.py), and every process's own figures.
    "Failed commits (5 min)",
    "Resident memory",
    "Versions running",
}


def run_the_dashboards_queries(prom: Prometheus) -> None:
    """Every query of deploy/grafana/dedupe.json parses and runs on this Prometheus (the
    dashboard's instance choice set to all); those of the panels that must show the idle
    workers return series once a rate has two scrapes to go on."""
    board = json.loads(grafana_dashboard.OUT.read_text())
    targets = [(p["title"], t["expr"]) for p in board["panels"] for t in p.get("targets", [])]

    def empty() -> list[str]:
        return [
            f"{title}: {expr}"
            for title, expr in targets
            if title in ALWAYS_THERE
            and 'job="dedupe-spark"' not in expr  # no lake job runs here
            and not prom.query(expr.replace("$instance", ".*"))
        ]

    missing: list[str] = []

    def none_missing() -> bool:
        missing[:] = empty()
        return not missing

    try:
        wait_for("series for every panel that shows idle workers", none_missing, 30)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; no series: {missing}") from None


def test_worker_down_fires_for_a_killed_and_a_stopped_worker_and_clears(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    prometheus: Callable[[list[Worker]], Prometheus],
) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i)
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready()
    prom = prometheus(workers)
    instances = {f"127.0.0.1:{w.web_port}" for w in workers}

    def up() -> dict[str, float]:
        return {s["labels"]["instance"]: s["value"] for s in prom.query('up{job="dedupe-worker"}')}

    wait_for("both workers scraped", lambda: up() == dict.fromkeys(instances, 1.0), 60)
    for metric in (
        "dedupe_min_window_seconds",
        "dedupe_data_dir_free_bytes",
        "dedupe_commits_total",
    ):
        seen = {s["labels"]["instance"] for s in prom.query(metric)}
        assert seen == instances, f"{metric}: scraped from {seen}"
    assert prom.alerts(ALERT) == {}
    run_the_dashboards_queries(prom)

    killed, stopped = workers
    killed.kill(signal.SIGKILL)
    assert stopped.proc is not None
    stopped.proc.send_signal(signal.SIGSTOP)
    faulted = time.monotonic()
    try:
        pending = wait_for(
            "pending for both",
            lambda: prom.alerts(ALERT) == dict.fromkeys(instances, "pending"),
            30,
        )
        firing = wait_for(
            "firing for both",
            lambda: prom.alerts(ALERT) == dict.fromkeys(instances, "firing"),
            120,
        )
        fired_after = time.monotonic() - faulted
        assert fired_after >= 60, f"fired {fired_after:.0f}s after the faults, before its for: 1m"
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    killed.start()
    cleared = wait_for("cleared", lambda: prom.alerts(ALERT) == {}, 120)
    print(
        f"\n{ALERT}: pending {pending:.0f}s after kill -9 and SIGSTOP, firing "
        f"{fired_after:.0f}s after (for: 1m; {firing:.0f}s after pending), cleared {cleared:.0f}s "
        "after restart and SIGCONT"
    )
