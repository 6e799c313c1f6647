"""deploy/grafana/dedupe.json is what scripts/grafana_dashboard.py builds, its panels are laid
out without overlap with unique ids, and every query names metrics the code exports (as
docs/metrics.md lists them; tests/unit/docs/test_metrics_reference.py keeps that list true). The
observe tier runs each query on a real Prometheus."""

from __future__ import annotations

import json
import re

from scripts import alert_rules, grafana_dashboard
from tests.unit.docs.test_metrics_reference import documented_metrics


def queries() -> list[str]:
    board = json.loads(grafana_dashboard.OUT.read_text())
    return [t["expr"] for p in board["panels"] for t in p.get("targets", [])]


def test_the_file_is_the_scripts_output() -> None:
    assert grafana_dashboard.OUT.read_text() == grafana_dashboard.render(), (
        "deploy/grafana/dedupe.json is stale: python -m scripts.grafana_dashboard"
    )


def test_every_query_names_exported_metrics() -> None:
    known = documented_metrics() | {"up"}
    for expr in queries():
        names = set(re.findall(r"\b(dedupe_\w+|process_\w+|up)(?=\{|\s*\))", expr))
        assert names, expr
        families = {re.sub(r"_(total|bucket)$", "", n) for n in names}
        assert families <= known, (expr, families - known)


def test_panels_have_unique_ids_and_do_not_overlap() -> None:
    board = json.loads(grafana_dashboard.OUT.read_text())
    panels = board["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    cells: set[tuple[int, int]] = set()
    for p in panels:
        g = p["gridPos"]
        mine = {
            (x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])
        }
        assert not mine & cells, p["title"]
        cells |= mine


def test_every_job_the_alert_rules_name_has_panels() -> None:
    rules = (grafana_dashboard.OUT.parents[1] / "prometheus" / "alerts.yml").read_text()
    jobs = set(re.findall(r'job="([\w-]+)"', rules))
    shown = " ".join(queries())
    for job in jobs:
        assert f'job="{job}"' in shown, job
    for name in (
        "dedupe_lake_offsets_behind",
        "process_resident_memory_bytes",
        "dedupe_build_info",
    ):
        assert name in shown, name


def test_the_dead_letter_panel_counts_every_write_to_the_dead_letter_topic() -> None:
    """The outcomes DedupeDeadLetters reads (test_alert_rules_static.py holds it to them)."""
    board = json.loads(grafana_dashboard.OUT.read_text())
    [panel] = [p for p in board["panels"] if p["title"] == "Dead-lettered per second"]
    [target] = panel["targets"]
    selector = f"{grafana_dashboard.W}, {alert_rules.DEAD_LETTER_SELECTOR}"
    assert f"rate(dedupe_records_total{{{selector}}}[1m])" in target["expr"]
    for outcome in alert_rules.DEAD_LETTER_OUTCOMES:
        assert outcome in target["expr"], outcome


def test_every_job_the_alert_rules_name_has_an_up_panel() -> None:
    """Whether each component's targets answer their scrapes, as its ...Down alert reads it."""
    rules = (grafana_dashboard.OUT.parents[1] / "prometheus" / "alerts.yml").read_text()
    jobs = set(re.findall(r'job="([\w-]+)"', rules))
    ups = {m for q in queries() for m in re.findall(r'^up\{job="([\w-]+)"', q)}
    assert ups == jobs
