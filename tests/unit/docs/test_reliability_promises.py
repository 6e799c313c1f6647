"""The fault rows the README and docs/testing.md promise are in docs/reliability.md.

Both name the fault tiers by their rows ("F1-F22", "C1-C8"); the report is rewritten by test
runs, so a run that lost rows, or a tier that grew rows the README does not name, would leave
a promise with nothing behind it. Each promised row must be in its tier's sections (F rows in
``faults`` or ``network``, the fault tier's network faults; C rows in ``cluster``), and each
section's numbered rows must be promised."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PROMISING = [ROOT / "README.md", ROOT / "docs" / "testing.md"]
REPORT = ROOT / "docs" / "reliability.md"
SECTIONS_OF = {"F": ("faults", "network"), "C": ("cluster",)}
#: "F1-F22" or "C1-8" (a hyphen or an en dash): every row from the first number to the last;
#: a row named alone ("F25", not "F8a") is promised too (a range may skip a row another tier
#: of work has not landed yet).
RANGE = re.compile(r"\b([FC])(\d+)(?:\s*[-\u2013]\s*\1?(\d+))?\b")


def promised(text: str) -> set[str]:
    """The base rows (``F7``, not ``F7a``) a text promises by its ranges."""
    return {
        f"{letter}{n}"
        for letter, first, last in RANGE.findall(text)
        for n in range(int(first), int(last or first) + 1)
    }


def rows_by_section(text: str) -> dict[str, set[str]]:
    """Each section's base rows: the fault id that starts a table row, without its letter."""
    sections = dict(re.findall(r"<!-- section: (\w+) -->\n(.*?)<!-- /section -->", text, re.S))
    return {
        name: set(re.findall(r"^\| ([FC]\d+)[a-z]? ", body, re.M))
        for name, body in sections.items()
    }


def test_the_readme_and_testing_doc_promise_the_fault_and_cluster_rows() -> None:
    """Without this, a rewording that drops a range would leave the check below with nothing."""
    for path in PROMISING:
        rows = promised(path.read_text())
        assert {"F1", "F22", "C1", "C8"} <= rows, path.name


def test_every_promised_row_is_in_its_section_of_the_report() -> None:
    sections = rows_by_section(REPORT.read_text())
    for path in PROMISING:
        for row in sorted(promised(path.read_text())):
            names = SECTIONS_OF[row[0]]
            assert any(row in sections.get(name, set()) for name in names), (
                f"{path.name} promises {row}; docs/reliability.md's {' / '.join(names)} "
                "section has no row"
            )


def test_every_numbered_row_of_the_report_is_promised() -> None:
    promises = set().union(*(promised(path.read_text()) for path in PROMISING))
    for section, rows in rows_by_section(REPORT.read_text()).items():
        unnamed = sorted(rows - promises)
        assert not unnamed, f"{section} rows {unnamed} are not named by the README's ranges"


def test_the_parsers_read_ranges_and_rows() -> None:
    assert promised("tests/faults (F1-F3: ...) and C1-C2, F8a alone, F25 too") == {
        "F1",
        "F2",
        "F3",
        "C1",
        "C2",
        "F25",
    }
    report = (
        "<!-- section: faults -->\n| fault | nodes |\n|---|---|\n"
        "| F1 kill -9 | 1 |\n| F3a graceful | 1 |\n| F10 disk | 1 |\n<!-- /section -->\n"
        "<!-- section: cluster -->\n| C2 coordinator | 3 |\n<!-- /section -->\n"
    )
    assert rows_by_section(report) == {"faults": {"F1", "F3", "F10"}, "cluster": {"C2"}}
