"""A real Prometheus (Debian's package) scrapes two real workers and a real ingest service every
second and evaluates deploy/prometheus/alerts.yml as shipped. One worker is killed (kill -9) and
the other stopped (SIGSTOP: a frozen process whose port still accepts connections), and the
ingest killed: DedupeWorkerDown goes pending, then fires for both workers after its ``for`` of
one minute, and DedupeIngestDown for the ingest after its own; the killed processes are started
again and the stopped one continued, and both alerts clear. Before the faults, the series the
rules read are there under the names the rules use, the labelled counters the rules and the
dashboard read are there at 0 before any event (so ``increase()`` counts the first), and every
query of the Grafana dashboard (deploy/grafana/dedupe.json) runs.

How to run: ``make test-observe`` (a broker on the tier's port, Prometheus on 19490, the ingest
on 19491).
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts import grafana_dashboard
from tests.ingest.support import IngestProcess
from tests.observe.prometheus import Prometheus
from tests.support import Broker, Names
from tests.workers import Worker

ALERT = "DedupeWorkerDown"
INGEST_ALERT = "DedupeIngestDown"
#: The ingest's port in this tier (beside Prometheus's 19490; no other tier's).
INGEST_PORT = 19491


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Callable[[dict[str, list[str]]], Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, list[str]]) -> Prometheus:
        p = Prometheus(tmp_path / "prometheus", targets)
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
    "Ingest up",
    "Requests per second by status",
    "Events acknowledged per second",
    "Kafka errors per second, by kind",
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


def zero_series(prom: Prometheus, metric: str) -> dict[str, float]:
    """``metric``'s series on this Prometheus, by their labels other than job and instance."""
    return {
        ",".join(
            f"{k}={v}"
            for k, v in sorted(x["labels"].items())
            if k not in ("__name__", "job", "instance")
        ): x["value"]
        for x in prom.query(metric)
    }


def test_down_alerts_fire_for_killed_and_stopped_processes_and_clear(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    tmp_path: Path,
    prometheus: Callable[[dict[str, list[str]]], Prometheus],
) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i)
        workers.append(w)
        w.start()
    ingest = IngestProcess(broker, names.input_topic, tmp_path / "ingest.log", port=INGEST_PORT)
    ingest.start()
    try:
        run_the_faults(workers, ingest, prometheus)
    finally:
        ingest.stop()


def run_the_faults(
    workers: list[Worker],
    ingest: IngestProcess,
    prometheus: Callable[[dict[str, list[str]]], Prometheus],
) -> None:
    for w in workers:
        w.wait_ready()
    ingest.wait_ready()
    instances = {f"127.0.0.1:{w.web_port}" for w in workers}
    ingest_instance = f"127.0.0.1:{ingest.port}"
    prom = prometheus({"dedupe-worker": sorted(instances), "dedupe-ingest": [ingest_instance]})

    def up(job: str) -> dict[str, float]:
        return {s["labels"]["instance"]: s["value"] for s in prom.query(f'up{{job="{job}"}}')}

    wait_for(
        "both workers scraped", lambda: up("dedupe-worker") == dict.fromkeys(instances, 1.0), 60
    )
    wait_for("the ingest scraped", lambda: up("dedupe-ingest") == {ingest_instance: 1.0}, 60)
    for metric in (
        "dedupe_min_window_seconds",
        "dedupe_data_dir_free_bytes",
        "dedupe_commits_total",
    ):
        seen = {s["labels"]["instance"] for s in prom.query(metric)}
        assert seen == instances, f"{metric}: scraped from {seen}"
    # The labelled counters DedupeCommitsFailing and the ingest's Kafka-error panel read, at 0
    # before any event: a series born at its first event is one increase() never sees rise.
    kinds = zero_series(prom, "dedupe_ingest_kafka_errors_total")
    assert kinds and set(kinds.values()) == {0.0}, kinds
    assert {k.split("=", 1)[1] for k in kinds} >= {"timeout", "retriable", "other"}, kinds
    failures = zero_series(prom, "dedupe_commit_failures_total")
    assert failures and set(failures.values()) == {0.0}, failures
    assert prom.alerts(ALERT) == {} and prom.alerts(INGEST_ALERT) == {}
    run_the_dashboards_queries(prom)

    killed, stopped = workers
    killed.kill(signal.SIGKILL)
    ingest.stop(signal.SIGKILL)
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
        wait_for(
            "the ingest's firing",
            lambda: prom.alerts(INGEST_ALERT) == {ingest_instance: "firing"},
            60,
        )
        ingest_after = time.monotonic() - faulted
        assert ingest_after >= 60, f"{INGEST_ALERT} fired {ingest_after:.0f}s after the kill"
    finally:
        stopped.proc.send_signal(signal.SIGCONT)
    killed.start()
    ingest.start()
    cleared = wait_for(
        "cleared",
        lambda: prom.alerts(ALERT) == {} and prom.alerts(INGEST_ALERT) == {},
        120,
    )
    print(
        f"\n{ALERT}: pending {pending:.0f}s after kill -9 and SIGSTOP, firing "
        f"{fired_after:.0f}s after (for: 1m; {firing:.0f}s after pending), cleared {cleared:.0f}s "
        f"after restart and SIGCONT; {INGEST_ALERT} firing {ingest_after:.0f}s after kill -9"
    )
