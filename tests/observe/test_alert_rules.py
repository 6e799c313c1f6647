"""The alert rules (deploy/prometheus/alerts.yml) as Prometheus itself reads them: ``promtool
check rules`` and the rules' unit tests (``promtool test rules alerts_test.yml``: each alert
fires on what should page or open a ticket, after its ``for``, and not on its look-alike); each
alert has a test; each runbook link is absolute and leads to its alert's section of
docs/operations.md; each metric a rule reads is one the code exports (docs/metrics.md lists
them, tests/unit/docs/test_metrics_reference.py keeps that list true).
"""

from __future__ import annotations

import re
import subprocess

from scripts import alert_rules
from tests.observe.prometheus import RULES, binary
from tests.unit.docs.test_docs_links import heading_ids
from tests.unit.docs.test_metrics_reference import documented_metrics

ROOT = RULES.parents[2]


def test_promtool_checks_the_rules_and_passes_their_unit_tests() -> None:
    promtool = binary("promtool")
    check = subprocess.run([promtool, "check", "rules", str(RULES)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
    tests = subprocess.run(
        [promtool, "test", "rules", "alerts_test.yml"],
        cwd=RULES.parent,
        capture_output=True,
        text=True,
    )
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "SUCCESS" in tests.stdout


def alerts_of(text: str) -> list[str]:
    return re.findall(r"^\s+- alert: (\w+)$", text, re.M)


def test_every_alert_has_a_unit_test_and_a_runbook_section() -> None:
    text = RULES.read_text()
    tested = (RULES.parent / "alerts_test.yml").read_text()
    sections = heading_ids(ROOT / "docs" / "operations.md")
    for alert in alerts_of(text):
        assert f"alertname: {alert}" in tested, f"{alert} has no promtool test"
        assert alert.lower() in sections, f"docs/operations.md has no section {alert}"
    links = alert_rules.links(text)
    assert links == [(alert_rules.DEFAULT_BASE, a.lower()) for a in alerts_of(text)]


def test_every_metric_a_rule_reads_is_documented_and_exported() -> None:
    read = set(re.findall(r"\b(dedupe_\w+)", RULES.read_text()))
    # a counter's samples end in _total, the reference names the family
    families = {re.sub(r"_total$", "", m) for m in read}
    missing = families - documented_metrics()
    assert not missing, f"rules read metrics docs/metrics.md does not list: {sorted(missing)}"
