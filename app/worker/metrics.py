"""Prometheus metrics of the worker (``GET /metrics``), read from the live figures at scrape time.

Per partition this worker owns (label ``partition``):

- ``dedupe_records_total{outcome=...}``: forwarded, duplicates_dropped, dead_lettered, rekeyed,
  messageId_reused
- ``dedupe_strategy_records_total{strategy=message_id|producer_sequence|off, outcome=...}``
- ``dedupe_producers_held``
- ``dedupe_ids_held``, ``dedupe_effective_window_seconds``, ``dedupe_consumer_lag``
- ``dedupe_predicted_window_seconds``: the window the size cap will leave at the observed
  new-id rate (``app/worker/window_watch.py``)
- ``dedupe_aged_out_total{reason=expired|evicted}``
- ``dedupe_commits_total``, ``dedupe_last_commit_timestamp_seconds``

and ``dedupe_commit_seconds`` (histogram of transaction commit latency, all partitions) and
``dedupe_rebalance_seconds`` (histogram of rebalance durations, fed by :class:`RebalanceSensor`),
``dedupe_restore_remaining_offsets{changelog, partition}`` and ``dedupe_restored_records_total``
(the bulk restorer's progress), ``dedupe_standby_lag_offsets{changelog, partition}`` (standby
copies kept here), ``dedupe_min_window_seconds`` (the window below which an effective window
is too short), ``dedupe_data_dir_free_bytes`` and ``dedupe_data_dir_size_bytes`` (the data
dir's file system), the process's ``process_*`` metrics and ``dedupe_build_info``
(``envsettings/process_metrics.py``). docs/metrics.md lists every metric with its labels; the
alert rules in deploy/prometheus/ read them.

A labelled counter has no series until its first event, and ``increase()`` over a series that
starts at 1 sees no increase: :func:`register` exports every partition and reason of
``dedupe_commit_failures_total`` at 0 from the start, so the first failure counts.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from time import monotonic
from typing import TYPE_CHECKING, Any

import faust
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.eos.metrics import (
    BELOW_MIN_INSYNC,
    COMMIT_FAILURE_REASONS,
    COMMIT_FAILURES,
    COMMIT_SECONDS,
)
from envsettings import process_metrics
from recovery.restore import Progress

if TYPE_CHECKING:
    from app.settings import Settings

# No auto-describe: collecting at registration would build Faust's consumer before the worker.
REGISTRY = CollectorRegistry()
process_metrics.register(REGISTRY)

# What the exactly-once layer measures is declared there (app/eos/metrics.py) and exported here.
for _collector in (COMMIT_SECONDS, COMMIT_FAILURES, BELOW_MIN_INSYNC):
    REGISTRY.register(_collector)


REBALANCE_SECONDS = Histogram(
    "dedupe_rebalance_seconds",
    "Duration of a consumer group rebalance on this worker, from its start until the "
    "partitions are assigned and their state recovered.",
    buckets=(0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600),
    registry=REGISTRY,
)


RESTORE_REMAINING = Gauge(
    "dedupe_restore_remaining_offsets",
    "Changelog offsets a bulk restore still has to read, per changelog partition (0: done).",
    labelnames=["changelog", "partition"],
    registry=REGISTRY,
)
RESTORED_RECORDS = Counter(
    "dedupe_restored_records",
    "Changelog records written into the local state by bulk restores.",
    labelnames=["changelog"],
    registry=REGISTRY,
)


def restore_progress(progress: Progress, written: int) -> None:
    """The restorer's progress callback (``recovery.restore.OnProgress``)."""
    tp = progress.tp
    RESTORE_REMAINING.labels(tp.topic, str(tp.partition)).set(progress.remaining)
    if written:
        RESTORED_RECORDS.labels(tp.topic).inc(written)


class RebalanceSensor(faust.Sensor):  # type: ignore[misc]
    """The worker's one Faust sensor: times rebalances (``dedupe_rebalance_seconds``).

    The worker takes Faust's Monitor sensor off (``DedupeApp.on_init_dependencies``: its
    per-record hooks cost time for pages this worker does not serve). Faust's app keeps one
    state per sensor for each rebalance and takes an empty state, which is what no sensor at
    all gives, for a lost one: it then warned "Missing sensor state for rebalance #N" (and
    "... rebalance end #N") at every start and rebalance. With this sensor the state is there
    and says something an operator can use. Its per-record hooks are Faust's no-ops, and the
    exactly-once batch path does not call them (``app.eos.Consumer``).
    """

    def on_rebalance_start(self, app: Any) -> dict[str, float]:
        return {"time_start": monotonic()}

    def on_rebalance_end(self, app: Any, state: dict[str, float]) -> None:
        REBALANCE_SECONDS.observe(monotonic() - state["time_start"])


#: The outcomes of ``app.worker.dedup.RecordOutcome``, as ``/stats`` names them.
OUTCOMES = ("forwarded", "duplicates_dropped", "dead_lettered", "rekeyed", "messageId_reused")


class PartitionCollector(Collector):
    """Builds the per-partition families from ``stats()`` (the same figures as ``/stats``)."""

    def __init__(self, stats: Callable[[], dict[str, Any]]) -> None:
        self.stats = stats

    def collect(self) -> Iterator[Metric]:
        records = CounterMetricFamily(
            "dedupe_records", "Records handled by this process", labels=["partition", "outcome"]
        )
        aged = CounterMetricFamily(
            "dedupe_aged_out", "Ids removed by age-out", labels=["partition", "reason"]
        )
        by_strategy = CounterMetricFamily(
            "dedupe_strategy_records",
            "Records handled by this process, per dedup strategy",
            labels=["partition", "strategy", "outcome"],
        )
        producers = GaugeMetricFamily(
            "dedupe_producers_held", "Producers remembered", labels=["partition"]
        )
        commits = CounterMetricFamily(
            "dedupe_commits", "Transactions committed", labels=["partition"]
        )
        held = GaugeMetricFamily("dedupe_ids_held", "Ids held", labels=["partition"])
        window = GaugeMetricFamily(
            "dedupe_effective_window_seconds", "Effective dedup window", labels=["partition"]
        )
        predicted = GaugeMetricFamily(
            "dedupe_predicted_window_seconds",
            "Window the size cap will leave at the observed new-id rate (cap / rate)",
            labels=["partition"],
        )
        lag = GaugeMetricFamily(
            "dedupe_consumer_lag", "Records not yet processed", labels=["partition"]
        )
        last = GaugeMetricFamily(
            "dedupe_last_commit_timestamp_seconds", "Time of the last commit", labels=["partition"]
        )
        stats = self.stats()
        for p, s in stats["partitions"].items():
            for outcome in OUTCOMES:
                records.add_metric([p, outcome], s[outcome])
            for strategy, outcomes in s["by_strategy"].items():
                for outcome, n in outcomes.items():
                    by_strategy.add_metric([p, strategy, outcome], n)
            producers.add_metric([p], s["producers_held"])
            aged.add_metric([p, "expired"], s["expired"])
            aged.add_metric([p, "evicted"], s["evicted"])
            commits.add_metric([p], s["commits"])
            held.add_metric([p], s["ids_held"])
            if s["effective_window_ms"] is not None:
                window.add_metric([p], s["effective_window_ms"] / 1000)
            forecast_ms = s["window_forecast"]["predicted_window_ms"]
            if forecast_ms is not None:
                predicted.add_metric([p], forecast_ms / 1000)
            if s["consumer_lag"] is not None:
                lag.add_metric([p], s["consumer_lag"])
            if s["last_commit_at"] is not None:
                last.add_metric([p], s["last_commit_at"])
        standby_lag = GaugeMetricFamily(
            "dedupe_standby_lag_offsets",
            "Offsets a standby copy is behind its changelog's last stable offset",
            labels=["changelog", "partition"],
        )
        for name, s in stats["standbys"].items():
            if s["lag"] is not None:
                standby_lag.add_metric([name.rsplit("-", 1)[0], str(s["partition"])], s["lag"])
        yield from (records, by_strategy, aged, commits, held, producers, window, predicted)
        yield from (lag, last)
        yield standby_lag


class WorkerCollector(Collector):
    """The worker's own figures: the shortest acceptable window (what the alert on the
    effective window compares with) and the data dir's file system (a full disk stops every
    write of RocksDB)."""

    def __init__(self, min_window_seconds: float, data_dir: Path) -> None:
        self.min_window_seconds = min_window_seconds
        self.data_dir = data_dir

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(
            "dedupe_min_window_seconds",
            "Shortest acceptable effective window: DEDUPE_MIN_WINDOW, or DEDUPE_WINDOW if shorter",
            value=self.min_window_seconds,
        )
        try:
            usage = shutil.disk_usage(self.data_dir)
        except OSError:  # not created yet: no figure rather than a wrong one
            return
        yield GaugeMetricFamily(
            "dedupe_data_dir_free_bytes",
            "Bytes free on the data dir's file system (for unprivileged processes)",
            value=usage.free,
        )
        yield GaugeMetricFamily(
            "dedupe_data_dir_size_bytes", "Size of the data dir's file system", value=usage.total
        )


def export_commit_failures(partitions: int) -> None:
    """Every partition's and reason's ``dedupe_commit_failures_total`` at 0 (module docstring):
    each partition of the pipeline, as any of them may be assigned here."""
    for partition in range(partitions):
        for reason in COMMIT_FAILURE_REASONS:
            COMMIT_FAILURES.labels(str(partition), reason)


def register(stats: Callable[[], dict[str, Any]], settings: Settings) -> None:
    export_commit_failures(settings.partitions)
    REGISTRY.register(PartitionCollector(stats))
    REGISTRY.register(WorkerCollector(min(settings.min_window, settings.window), settings.data_dir))


def exposition() -> bytes:
    return generate_latest(REGISTRY)
