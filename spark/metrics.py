"""Prometheus metrics of the Spark lake job, served on ``DEDUPE_SPARK_METRICS_HOST:PORT``
(``GET /metrics``; docs/metrics.md lists them), from each query's streaming progress as the
job's loop reads it (``spark/job.py``, twice a second).

``query`` is the streaming query: ``events`` (the events table) or ``event_counts``.
``dedupe_lake_offsets_behind`` is what the query's last progress says it had left to read of
the clean topic: the sum over partitions of the latest offset Spark saw minus the end offset of
the batch (Spark reports both per Kafka partition; an idle query's progress, every 10 s, keeps
the latest current).

The Python process's own metrics and ``dedupe_build_info`` come from
``envsettings/process_metrics.py``. The job's work runs in Spark's JVM, a child process the
driver starts, so its memory and CPU are not the Python process's: ``dedupe_spark_jvm_process_*``
reads the same figures for the JVM (:func:`watch_jvm`). The counters start at 0 for each query
(:meth:`ProgressMetrics.expect`): ``increase()`` over a series that first appears at 1 sees no
increase, and the lake-lag alert reads ``dedupe_lake_batches_total`` staying flat.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    ProcessCollector,
    start_http_server,
)

from envsettings import process_metrics

REGISTRY = CollectorRegistry()
process_metrics.register(REGISTRY)

#: The JVM's process id once :func:`watch_jvm` knows it.
_jvm_pid: list[int] = []


def _jvm_proc_entry() -> str:
    # No JVM yet: a name with no /proc entry, for which the collector reports nothing.
    return str(_jvm_pid[0]) if _jvm_pid else "no-jvm"


JVM = ProcessCollector(namespace="dedupe_spark_jvm", pid=_jvm_proc_entry, registry=REGISTRY)


def watch_jvm(pid: int) -> None:
    """Report the process metrics of Spark's JVM (``dedupe_spark_jvm_process_*``) from now on."""
    _jvm_pid[:] = [pid]


ROWS = Counter(
    "dedupe_lake_rows",
    "Rows the query read from the clean topic, over its finished micro-batches",
    labelnames=["query"],
    registry=REGISTRY,
)
BATCHES = Counter(
    "dedupe_lake_batches",
    "Micro-batches the query finished",
    labelnames=["query"],
    registry=REGISTRY,
)
BATCH_SECONDS = Gauge(
    "dedupe_lake_batch_duration_seconds",
    "Duration of the query's last micro-batch (Spark's triggerExecution)",
    labelnames=["query"],
    registry=REGISTRY,
)
BEHIND = Gauge(
    "dedupe_lake_offsets_behind",
    "Offsets of the clean topic the query had not read at its last progress",
    labelnames=["query"],
    registry=REGISTRY,
)
LAST_BATCH = Gauge(
    "dedupe_lake_last_batch_timestamp_seconds",
    "Unix time the query's last micro-batch started",
    labelnames=["query"],
    registry=REGISTRY,
)


def serve(host: str, port: int) -> None:
    """Serve ``GET /metrics`` from a daemon thread (port 0: not at all)."""
    if port:
        start_http_server(port, addr=host, registry=REGISTRY)


def offsets_behind(end_offset: str | None, latest_offset: str | None) -> int | None:
    """Sum of latest - end over the partitions of Kafka sources' offsets JSON
    (``{"topic": {"0": 12, ...}}``); None when either is missing or not that shape (a restarted
    query's first progress reported a latest offset that is not JSON: the figure waits for the
    next progress rather than stopping the job)."""
    try:
        end, latest = json.loads(end_offset or ""), json.loads(latest_offset or "")
        return sum(
            max(0, int(offset) - int(end.get(topic, {}).get(partition, 0)))
            for topic, partitions in latest.items()
            for partition, offset in partitions.items()
        )
    except (ValueError, TypeError, AttributeError):
        return None


class ProgressMetrics:
    """Turns each query's progress into the metrics above; a batch counts once."""

    def __init__(self) -> None:
        self.last_batch: dict[str, int] = {}

    def expect(self, names: list[str]) -> None:
        """Export the counters of the queries ``names`` at 0 before their first batch."""
        for name in names:
            ROWS.labels(name)
            BATCHES.labels(name)

    def observe(self, name: str, progress: Any) -> None:
        behind = [offsets_behind(s.endOffset, s.latestOffset) for s in progress.sources]
        if behind and all(b is not None for b in behind):
            BEHIND.labels(name).set(sum(b for b in behind if b is not None))
        if progress.batchId <= self.last_batch.get(name, -1):
            return
        self.last_batch[name] = progress.batchId
        ROWS.labels(name).inc(progress.numInputRows)
        BATCHES.labels(name).inc()
        duration = progress.durationMs.get("triggerExecution")
        if duration is not None:
            BATCH_SECONDS.labels(name).set(duration / 1000)
        started = datetime.fromisoformat(progress.timestamp.replace("Z", "+00:00"))
        LAST_BATCH.labels(name).set(started.timestamp())
