"""The published fault report (tests/reliability.py): a tier rewrites only its own section, and
a session that ran a subset keeps the other rows of its section."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability import Reliability


def run(section: str, rows: dict[str, int], path: Path) -> None:
    report = Reliability(section, f"{section} title", nodes=1, txn_version="1 / v1")
    for fault, missing in rows.items():
        report.record(fault, events=10, injected=1, duplicates=0, missing=missing, recover_s=1.0)
    report.publish(path, "Reliability report")


def table_rows(path: Path, section: str) -> dict[str, list[str]]:
    text = path.read_text().split(f"<!-- section: {section} -->")[1].split("<!-- /section -->")[0]
    return {
        line.split(" | ")[0][2:]: line.split(" | ")
        for line in text.splitlines()
        if line.startswith("| F") or line.startswith("| C")
    }


def test_a_subset_run_keeps_the_rows_it_did_not_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "reliability.md"
    monkeypatch.setenv("DEDUPE_REPORT_RUN", "2026-01-01 10:00 UTC")
    run("faults", {"F1 kill": 0, "F2 pause": 0, "F10 cut": 0}, path)
    monkeypatch.setenv("DEDUPE_REPORT_RUN", "2026-01-02 10:00 UTC")
    run("faults", {"F2 pause": 3}, path)
    rows = table_rows(path, "faults")
    assert set(rows) == {"F1 kill", "F2 pause", "F10 cut"}
    assert rows["F2 pause"][7] == "3"  # the new figures replace the old
    assert rows["F1 kill"][7] == "0"
    assert list(rows) == ["F1 kill", "F2 pause", "F10 cut"]  # F10 after F2
    assert "1 of the 3 rows below" in path.read_text()


def test_lanes_of_one_run_count_each_others_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two lanes of one ``make test`` publish parts of a tier into one section, minutes apart:
    the header counts the rows of both, dated alike."""
    path = tmp_path / "reliability.md"
    monkeypatch.setenv("DEDUPE_REPORT_RUN", "2026-01-01 10:00 UTC")
    run("faults", {"F1 kill": 0, "F2 pause": 0, "F10 cut": 0}, path)
    monkeypatch.setenv("DEDUPE_REPORT_RUN", "2026-01-02 10:00 UTC")
    run("faults", {"F2 pause": 0}, path)
    run("faults", {"F10 cut": 0}, path)
    text = path.read_text()
    assert "Latest run 2026-01-02 10:00 UTC" in text
    assert "2 of the 3 rows below" in text
    assert table_rows(path, "faults")["F1 kill"][-1] == "2026-01-01 10:00 UTC |"


def test_each_tier_rewrites_only_its_own_section(tmp_path: Path) -> None:
    path = tmp_path / "reliability.md"
    run("faults", {"F1 kill": 0}, path)
    run("cluster", {"C1 leader": 0}, path)
    run("faults", {"F1 kill": 1}, path)
    assert set(table_rows(path, "cluster")) == {"C1 leader"}
    assert table_rows(path, "faults")["F1 kill"][7] == "1"
    assert path.read_text().count("# Reliability report") == 1


def test_a_session_without_rows_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "reliability.md"
    run("faults", {}, path)
    assert not path.exists()


def test_a_fault_run_on_both_transaction_versions_keeps_a_row_for_each(tmp_path: Path) -> None:
    path = tmp_path / "reliability.md"
    report = Reliability("cluster", "cluster title", nodes=3, txn_version="2 / v2")
    for version, missing in (("2 / v1", 1), ("2 / v2", 0)):
        report.record(
            "C1 leader",
            events=10,
            injected=1,
            duplicates=0,
            missing=missing,
            recover_s=1.0,
            txn_version=version,
        )
    report.publish(path, "Reliability report")
    again = Reliability("cluster", "cluster title", nodes=3, txn_version="2 / v2")
    again.record("C1 leader", events=10, injected=1, duplicates=0, missing=0, recover_s=1.0)
    again.publish(path, "Reliability report")  # the v2 row only: the v1 row stays
    lines = [line for line in path.read_text().splitlines() if line.startswith("| C1")]
    assert [(row.split(" | ")[2], row.split(" | ")[7]) for row in lines] == [
        ("2 / v1", "1"),
        ("2 / v2", "0"),
    ]


def _publish_many(section: str, path: str) -> None:
    for i in range(40):
        run(section, {f"{section[0].upper()}{i} fault": 0}, Path(path))


def test_two_tiers_publishing_at_once_keep_both_sections(tmp_path: Path) -> None:
    """``make test`` runs the fault tier beside the cluster tier: without the file lock, one
    tier's read-modify-write drops rows the other just wrote."""
    import multiprocessing

    path = tmp_path / "reliability.md"
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_publish_many, args=(s, str(path))) for s in ("faults", "cluster")]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    assert len(table_rows(path, "faults")) == 40
    assert len(table_rows(path, "cluster")) == 40


def test_rows_outside_every_section_stop_the_publish_instead_of_vanishing(tmp_path: Path) -> None:
    """A soak report of the layout before sections had its F rows dropped by the first run
    that published into it."""
    path = tmp_path / "soak.md"
    before = "# Soak report\n\n| fault | runs |\n|---|---|\n| F1 kill -9 | 1 |\n"
    path.write_text(before)
    with pytest.raises(ValueError, match="outside a <!-- section"):
        run("cluster", {"C1 kill": 0}, path)
    assert path.read_text() == before
