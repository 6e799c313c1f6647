"""The alert rules (deploy/prometheus/alerts.yml) and their tests as files: every alert has a
promtool case in which it fires, every job the rules name has an ``absent()`` rule, and the
runbook links are absolute, each under one base and naming its own alert's section of
docs/operations.md, moved to another base by ``python -m scripts.alert_rules``
(``make alert-rules``) with nothing else changed; DedupeDeadLetters reads every outcome the
worker dead-letters under, as the dashboard does. (promtool runs the rules and their cases in
tests/observe.)"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from app.worker.record_sends import RecordOutcome
from scripts import alert_rules
from tests.unit.docs.test_docs_links import heading_ids

ROOT = Path(__file__).resolve().parents[3]


def alerts(text: str) -> list[str]:
    return re.findall(r"^\s+- alert: (\w+)$", text, re.M)


def test_every_link_is_absolute_under_the_default_base_and_names_its_alert() -> None:
    text = alert_rules.RULES.read_text()
    names = alerts(text)
    assert alert_rules.links(text) == [(alert_rules.DEFAULT_BASE, a.lower()) for a in names]
    assert alert_rules.DEFAULT_BASE.endswith("/docs/operations.md")
    sections = heading_ids(ROOT / "docs" / "operations.md")
    assert {a.lower() for a in names} <= sections


def test_another_base_moves_every_link_and_nothing_else() -> None:
    text = alert_rules.RULES.read_text()
    out = alert_rules.render("https://runbooks.example/dedupe.html#")
    assert [b for b, _ in alert_rules.links(out)] == ["https://runbooks.example/dedupe.html"] * len(
        alerts(text)
    )
    assert [a for _, a in alert_rules.links(out)] == [a for _, a in alert_rules.links(text)]
    changed = [
        (old, new)
        for old, new in zip(text.splitlines(), out.splitlines(), strict=True)
        if old != new
    ]
    assert len(changed) == len(alerts(text))
    assert all("runbook_url:" in old for old, _ in changed)


@pytest.mark.parametrize(
    "base", ["docs/operations.md", "/runbook", "ftp://x.example/r", "https://x.example/r#a"]
)
def test_a_base_that_is_not_an_absolute_page_url_is_refused(base: str) -> None:
    with pytest.raises(ValueError, match="absolute http"):
        alert_rules.render(base)


def test_the_command_writes_the_rules(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "alerts.yml"
    assert alert_rules.main(["--runbook-base", "https://r.example/ops", "--out", str(out)]) == 0
    assert out.read_text() == alert_rules.render("https://r.example/ops")
    assert alert_rules.main(["--runbook-base", "ops.md"]) == 2
    assert "absolute" in capsys.readouterr().err


def test_every_alert_has_a_promtool_case_in_which_it_fires() -> None:
    rules = alert_rules.RULES.read_text()
    cases = yaml.safe_load((alert_rules.RULES.parent / "alerts_test.yml").read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case.get("alert_rule_test", [])
        if check.get("exp_alerts")
    }
    assert set(alerts(rules)) - fired == set()


def test_every_job_the_rules_name_has_an_absent_rule() -> None:
    """A job with no target at all has no ``up`` series for ``up == 0`` to find."""
    rules = alert_rules.RULES.read_text()
    jobs = set(re.findall(r'job="([\w-]+)"', rules))
    assert jobs == {"dedupe-worker", "dedupe-ingest", "dedupe-spark"}
    for job in jobs:
        assert f'expr: absent(up{{job="{job}"}})' in rules, job


def rule(name: str) -> dict[str, str]:
    groups = yaml.safe_load(alert_rules.RULES.read_text())["groups"]
    [found] = [r for g in groups for r in g["rules"] if r.get("alert") == name]
    return found


def test_the_dead_letter_alert_selects_every_dead_letter_outcome() -> None:
    """DedupeDeadLetters reads the outcomes the dashboard's dead-letter panel reads."""
    expr = rule("DedupeDeadLetters")["expr"]
    assert f"dedupe_records_total{{{alert_rules.DEAD_LETTER_SELECTOR}}}" in expr


def test_the_dead_letter_outcomes_are_those_the_worker_returns_after_a_dead_letter_send() -> None:
    """Each outcome ``app/worker/dedup.py`` returns from a dead-letter send (the send's own,
    ``Sends.dead_letter``'s, or one it names after it), and no other."""
    worker = ROOT / "app" / "worker"
    sends = (worker / "record_sends.py").read_text()
    [own] = re.findall(r"def dead_letter\(.*?return RecordOutcome\.(\w+)", sends, re.S)
    dedup = (worker / "dedup.py").read_text()
    after = re.findall(r"await self\._dead_letter\([^)]*\)\n\s+return RecordOutcome\.(\w+)", dedup)
    assert "return await self._dead_letter(" in dedup  # the send's own outcome is returned
    returned = {getattr(RecordOutcome, name) for name in (own, *after)}
    assert returned == set(alert_rules.DEAD_LETTER_OUTCOMES)


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_the_command_the_rules_header_gives_writes_a_file() -> None:
    """``make alert-rules`` prints the rules unless ALERT_RULES_OUT names a file: the command
    the header of alerts.yml gives for writing them names one, and make passes it on."""
    header = alert_rules.RULES.read_text().split("\ngroups:")[0]
    [command] = re.findall(r"`make alert-rules ([^`]+)`", " ".join(header.split("\n# ")))
    assert "ALERT_RULES_OUT=" in command
    dry = subprocess.run(
        ["make", "-s", "-n", "alert-rules", *command.split()],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m scripts.alert_rules --runbook-base '<url>'" in dry
    assert "--out '<file>'" in dry
