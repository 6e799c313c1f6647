"""docs/metrics.md lists every metric the worker, the ingest service and the Spark job export,
with its type and labels, and nothing else: built from the code's own registries (the worker's
per-partition families from a stats snapshot like ``/stats``'s), so a metric added, renamed or
relabelled without the reference fails here."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from app.worker import metrics as worker_metrics
from ingest import metrics as ingest_metrics
from spark import metrics as spark_metrics

REFERENCE = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"
ROW = re.compile(r"^\| `(\w+)` \| (\w+) \|([\w, ]*)\| ")


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """Each documented family: (type, labels)."""
    out = {}
    for line in REFERENCE.read_text().splitlines():
        m = ROW.match(line)
        if m:
            labels = frozenset(x.strip() for x in m.group(3).split(",") if x.strip())
            out[m.group(1)] = (m.group(2), labels)
    return out


def documented_metrics() -> set[str]:
    return set(documented())


def stats_snapshot() -> dict[str, Any]:
    """One partition with every figure set, one standby: every per-partition family has a
    sample."""
    partition = {
        **{outcome: 1 for outcome in worker_metrics.OUTCOMES},
        "by_strategy": {"message_id": {"forwarded": 1}},
        "producers_held": 1,
        "expired": 1,
        "evicted": 1,
        "commits": 1,
        "ids_held": 1,
        "effective_window_ms": 1000,
        "window_forecast": {"predicted_window_ms": 2000},
        "consumer_lag": 1,
        "last_commit_at": 1.0,
    }
    return {"partitions": {"0": partition}, "standbys": {"c-0": {"partition": 0, "lag": 1}}}


def exported(registry: CollectorRegistry) -> dict[str, tuple[str, frozenset[str]]]:
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        if family.name.endswith("_created"):
            continue  # prometheus_client's creation time of each counter and histogram
        labels = {k for s in family.samples for k in s.labels if k not in ("le", "quantile")}
        out[family.name] = (family.type, frozenset(labels))
    return out


def touch_labelled(registry: CollectorRegistry) -> None:
    """A child for each labelled metric object, so its labels show in the exposition."""
    for collector in list(registry._collector_to_names):
        names = getattr(collector, "_labelnames", ())
        if names:
            cast(Any, collector).labels(*["x"] * len(names))


def code_registry(data_dir: Path) -> CollectorRegistry:
    """Every metric of the worker, the ingest service and the Spark job in one registry (the
    families of every component once), each labelled metric with a child; the Spark JVM's
    process metrics only when ``spark_metrics._jvm_pid`` names a live process."""
    registry = CollectorRegistry()
    for source in (worker_metrics.REGISTRY, ingest_metrics.REGISTRY, spark_metrics.REGISTRY):
        for collector, names in list(source._collector_to_names.items()):
            if set(names) & set(registry._names_to_collectors):
                continue  # a family of every component (envsettings/process_metrics.py)
            registry.register(collector)
    registry.register(worker_metrics.PartitionCollector(stats_snapshot))
    registry.register(worker_metrics.WorkerCollector(86400.0, data_dir))
    touch_labelled(registry)
    return registry


def test_the_reference_lists_every_metric_with_its_type_and_labels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The Spark JVM's process metrics, from this process for the test (spark/metrics.py).
    monkeypatch.setattr(spark_metrics, "_jvm_pid", [os.getpid()])
    code = exported(code_registry(tmp_path))
    docs = documented()
    assert set(docs) - set(code) == set(), "documented but not exported"
    assert set(code) - set(docs) == set(), "exported but not in docs/metrics.md"
    for name, (kind, labels) in code.items():
        assert docs[name] == (kind, labels), f"{name}: code says {kind} {sorted(labels)}"


def test_the_reference_parser_reads_rows() -> None:
    docs = documented()
    assert docs["dedupe_records"] == ("counter", frozenset({"partition", "outcome"}))
    assert docs["dedupe_commit_seconds"] == ("histogram", frozenset())


def test_the_lake_lag_is_what_spark_had_left_to_read() -> None:
    """Spark's Kafka source reports offsets as {topic: {partition: offset}}."""
    end = '{"clean": {"0": 10, "1": 7}}'
    latest = '{"clean": {"0": 15, "1": 7, "2": 4}}'
    assert spark_metrics.offsets_behind(end, latest) == 5 + 0 + 4
    assert spark_metrics.offsets_behind(end, None) is None


@pytest.mark.parametrize("latest", ["", "None", "null", "{", '{"clean": 5}', '["x"]'])
def test_a_latest_offset_of_another_shape_gives_no_lag_figure_and_no_error(latest: str) -> None:
    """A restarted query's first progress once carried a latest offset that was not JSON, and
    the job died of the JSONDecodeError (Spark tier, the job killed and restarted)."""
    assert spark_metrics.offsets_behind('{"clean": {"0": 10}}', latest) is None
