"""The Grafana dashboard of the pipeline, deploy/grafana/dedupe.json, built from the panels below.

    python -m scripts.grafana_dashboard          # rewrites deploy/grafana/dedupe.json

Import the JSON in Grafana (Dashboards > New > Import) and pick the Prometheus data source that
scrapes the workers (job ``dedupe-worker``), the ingest services (job ``dedupe-ingest``) and the
Spark lake job (job ``dedupe-spark``).
Every query names metrics of docs/metrics.md; tests/unit/deploy/test_grafana_dashboard.py checks
that the file is this script's output and its queries name exported metrics, and the observe tier
runs each query on a real Prometheus scraping real workers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scripts.alert_rules import DEAD_LETTER_SELECTOR

OUT = Path(__file__).resolve().parents[1] / "deploy" / "grafana" / "dedupe.json"
DS = {"type": "prometheus", "uid": "${datasource}"}
#: The selectors of the worker's series (the dashboard's instance choice) and the ingest's.
W = 'job="dedupe-worker", instance=~"$instance"'
ING = 'job="dedupe-ingest"'
SPARK = 'job="dedupe-spark"'
#: Every component's series (their process metrics and versions).
ALL = 'job=~"dedupe-worker|dedupe-ingest|dedupe-spark"'
Query = tuple[str, str]  # (PromQL, legend)


def outcome_rate(selector: str) -> Query:
    """Records per second on each worker, of the outcomes ``selector`` (a label matcher) picks."""
    rate = f"rate(dedupe_records_total{{{W}, {selector}}}[1m])"
    return f"sum by (instance) ({rate})", "{{instance}}"


def quantile(q: float, histogram: str, selector: str) -> Query:
    rate = f"rate({histogram}_bucket{{{selector}}}[5m])"
    return f"histogram_quantile({q}, sum by (le) ({rate}))", f"p{round(q * 100)}"


def by(labels: str, how: str, expr: str, legend: str) -> Query:
    return f"{how} by ({labels}) ({expr})", legend


#: (row title, [(panel title, unit, [queries])]).
ROWS: list[tuple[str, list[tuple[str, str, list[Query]]]]] = [
    (
        "Records",
        [
            (
                "Forwarded (first sightings) per second",
                "ops",
                [outcome_rate('outcome="forwarded"')],
            ),
            ("Repeats dropped per second", "ops", [outcome_rate('outcome="duplicates_dropped"')]),
            ("Dead-lettered per second", "ops", [outcome_rate(DEAD_LETTER_SELECTOR)]),
            (
                "Consumer lag per partition",
                "short",
                [by("partition", "sum", f"dedupe_consumer_lag{{{W}}}", "partition {{partition}}")],
            ),
        ],
    ),
    (
        "Transactions",
        [
            (
                "Commit latency",
                "s",
                [
                    quantile(0.5, "dedupe_commit_seconds", W),
                    quantile(0.99, "dedupe_commit_seconds", W),
                ],
            ),
            (
                "Commits per second",
                "ops",
                [by("instance", "sum", f"rate(dedupe_commits_total{{{W}}}[1m])", "{{instance}}")],
            ),
            (
                "Failed commits (5 min)",
                "short",
                [
                    by(
                        "instance, reason",
                        "sum",
                        f"increase(dedupe_commit_failures_total{{{W}}}[5m])",
                        "{{instance}} {{reason}}",
                    )
                ],
            ),
            (
                "Partitions below min.insync.replicas",
                "short",
                [by("topic", "max", f"dedupe_partitions_below_min_insync{{{W}}}", "{{topic}}")],
            ),
        ],
    ),
    (
        "State",
        [
            (
                "Ids held per partition",
                "short",
                [by("partition", "sum", f"dedupe_ids_held{{{W}}}", "partition {{partition}}")],
            ),
            (
                "Effective window",
                "s",
                [
                    by(
                        "partition",
                        "min",
                        f"dedupe_effective_window_seconds{{{W}}}",
                        "partition {{partition}}",
                    ),
                    by(
                        "partition",
                        "min",
                        f"dedupe_predicted_window_seconds{{{W}}}",
                        "partition {{partition}}: what the cap will leave",
                    ),
                    (f"min(dedupe_min_window_seconds{{{W}}})", "minimum"),
                ],
            ),
            (
                "Restore: offsets left",
                "short",
                [
                    by(
                        "instance, changelog, partition",
                        "sum",
                        f"dedupe_restore_remaining_offsets{{{W}}}",
                        "{{instance}} {{changelog}}-{{partition}}",
                    )
                ],
            ),
            (
                "Standby lag",
                "short",
                [
                    by(
                        "instance, changelog, partition",
                        "max",
                        f"dedupe_standby_lag_offsets{{{W}}}",
                        "{{instance}} {{changelog}}-{{partition}}",
                    )
                ],
            ),
            (
                "Data dir free",
                "percentunit",
                [
                    (
                        f"dedupe_data_dir_free_bytes{{{W}}} / dedupe_data_dir_size_bytes{{{W}}}",
                        "{{instance}}",
                    )
                ],
            ),
            ("Workers up", "short", [(f"up{{{W}}}", "{{instance}}")]),
        ],
    ),
    (
        "Ingest",
        [
            (
                "Requests per second by status",
                "reqps",
                [
                    by(
                        "status",
                        "sum",
                        f"rate(dedupe_ingest_requests_total{{{ING}}}[1m])",
                        "{{status}}",
                    )
                ],
            ),
            (
                "Events acknowledged per second",
                "ops",
                [(f"sum(rate(dedupe_ingest_events_total{{{ING}}}[1m]))", "events")],
            ),
            ("Produce latency p99", "s", [quantile(0.99, "dedupe_ingest_produce_seconds", ING)]),
            (
                "Kafka errors per second, by kind",
                "ops",
                [
                    by(
                        "error",
                        "sum",
                        f"rate(dedupe_ingest_kafka_errors_total{{{ING}}}[5m])",
                        "{{error}}",
                    )
                ],
            ),
            ("Ingest up", "short", [(f"up{{{ING}}}", "{{instance}}")]),
        ],
    ),
    (
        "Lake (Spark job)",
        [
            (
                "Rows read per second",
                "ops",
                [
                    by(
                        "query",
                        "sum",
                        f"rate(dedupe_lake_rows_total{{{SPARK}}}[5m])",
                        "{{query}}",
                    )
                ],
            ),
            (
                "Offsets behind the clean topic",
                "short",
                [by("query", "max", f"dedupe_lake_offsets_behind{{{SPARK}}}", "{{query}}")],
            ),
            (
                "Micro-batch duration",
                "s",
                [by("query", "max", f"dedupe_lake_batch_duration_seconds{{{SPARK}}}", "{{query}}")],
            ),
            (
                "Since the last micro-batch started",
                "s",
                [
                    by(
                        "query",
                        "min",
                        f"time() - dedupe_lake_last_batch_timestamp_seconds{{{SPARK}}}",
                        "{{query}}",
                    )
                ],
            ),
            (
                "Micro-batches per minute",
                "short",
                [
                    by(
                        "query",
                        "sum",
                        f"increase(dedupe_lake_batches_total{{{SPARK}}}[1m])",
                        "{{query}}",
                    )
                ],
            ),
            ("Lake job up", "short", [(f"up{{{SPARK}}}", "{{instance}}")]),
        ],
    ),
    (
        "Processes",
        [
            (
                "Resident memory",
                "bytes",
                [
                    (f"process_resident_memory_bytes{{{ALL}}}", "{{job}} {{instance}}"),
                    (
                        f"dedupe_spark_jvm_process_resident_memory_bytes{{{SPARK}}}",
                        "{{job}} {{instance}} JVM",
                    ),
                ],
            ),
            (
                "CPU (cores)",
                "short",
                [
                    (f"rate(process_cpu_seconds_total{{{ALL}}}[1m])", "{{job}} {{instance}}"),
                    (
                        f"rate(dedupe_spark_jvm_process_cpu_seconds_total{{{SPARK}}}[1m])",
                        "{{job}} {{instance}} JVM",
                    ),
                ],
            ),
            (
                "Versions running",
                "short",
                [by("job, version", "count", f"dedupe_build_info{{{ALL}}}", "{{job}} {{version}}")],
            ),
            (
                "Open file descriptors",
                "short",
                [(f"process_open_fds{{{ALL}}}", "{{job}} {{instance}}")],
            ),
        ],
    ),
]


def dashboard() -> dict[str, Any]:
    panels: list[dict[str, Any]] = []
    y = 0
    for title, row in ROWS:
        panels.append(
            {
                "type": "row",
                "title": title,
                "collapsed": False,
                "id": len(panels) + 1,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        y += 1
        for i, (panel, unit, queries) in enumerate(row):
            panels.append(
                {
                    "type": "timeseries",
                    "title": panel,
                    "id": len(panels) + 1,
                    "datasource": DS,
                    "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)},
                    "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                    "targets": [
                        {
                            "refId": chr(ord("A") + j),
                            "datasource": DS,
                            "expr": expr,
                            "legendFormat": legend,
                        }
                        for j, (expr, legend) in enumerate(queries)
                    ],
                }
            )
        y += 8 * ((len(row) + 1) // 2)
    return {
        "title": "Dedup pipeline",
        "uid": "dedupe-pipeline",
        "schemaVersion": 39,
        "editable": True,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "tags": ["dedupe"],
        "templating": {
            "list": [
                {
                    "type": "datasource",
                    "name": "datasource",
                    "label": "Prometheus",
                    "query": "prometheus",
                },
                {
                    "type": "query",
                    "name": "instance",
                    "label": "Worker",
                    "datasource": DS,
                    "query": 'label_values(up{job="dedupe-worker"}, instance)',
                    "includeAll": True,
                    "multi": True,
                    "allValue": ".*",
                    "refresh": 2,
                },
            ]
        },
        "panels": panels,
    }


def render() -> str:
    return json.dumps(dashboard(), indent=2) + "\n"


def main() -> None:
    OUT.write_text(render())
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
