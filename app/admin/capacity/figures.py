"""The measured figures of the sizing tool, and the reader of the results rows they cite.

Each figure in ``figures.json`` names the benchmark results file it comes from and where in
it: a table ``row`` (its first cell) and ``column`` (optionally inside a ``section`` that starts
with that heading), or a list item starting with ``bullet`` (the first number after its
colon). ``tests/unit/app/admin/capacity/test_capacity_figures.py`` reads every one of them with
:func:`read_cited` and compares: a benchmark rerun that moves a figure fails that test until
``figures.json`` follows, so the tool never sizes from figures no benchmark produced. The
benchmarks make it follow themselves: each one calls :func:`refresh` after writing its results
file, which takes the figures citing that file from it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIGURES_FILE = Path(__file__).with_name("figures.json")
#: The repository root: results files are cited relative to it.
ROOT = Path(__file__).resolve().parents[3]
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


@dataclass(frozen=True)
class Figure:
    name: str
    value: float
    unit: str
    meaning: str
    source: dict[str, str]

    @property
    def cited(self) -> str:
        """Where the figure comes from, as the report prints it."""
        s = self.source
        where = s.get("row") or s.get("bullet", "")
        column = f", column {s['column']!r}" if "column" in s else ""
        section = f" under {s['section']!r}" if "section" in s else ""
        return f"{s['file']}{section}, {where!r}{column}"


def load(path: Path = FIGURES_FILE) -> dict[str, Figure]:
    """Every figure of ``figures.json``, by name."""
    raw: dict[str, Any] = json.loads(path.read_text())
    out = {}
    for name, f in raw["figures"].items():
        source = {k: str(v) for k, v in f.items() if k not in ("value", "unit", "meaning")}
        out[name] = Figure(name, float(f["value"]), f["unit"], f["meaning"], source)
    return out


def numbers(text: str) -> list[float]:
    """The numbers in ``text``, thousands separators dropped ("25,049  (0.02x)" -> 25049, 0.02)."""
    return [float(m.replace(",", "")) for m in _NUMBER.findall(text)]


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _section(lines: list[str], heading: str | None) -> list[str]:
    if heading is None:
        return lines
    for i, line in enumerate(lines):
        if line.startswith(heading):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("## ")), None)
            return lines[i + 1 : end]
    raise LookupError(f"no section {heading!r}")


def read_cited(source: dict[str, str], root: Path = ROOT) -> float:
    """The value the results file holds where ``source`` points (see the module docstring)."""
    lines = _section((root / source["file"]).read_text().splitlines(), source.get("section"))
    pick = -1 if source.get("take") == "last" else 0
    if "bullet" in source:
        for line in lines:
            if line.startswith("- " + source["bullet"]):
                return numbers(line.split(":", 1)[1])[pick]
        raise LookupError(f"{source['file']}: no list item {source['bullet']!r}")
    header: list[str] | None = None
    for line in lines:
        if not line.startswith("|"):
            header = None
            continue
        cells = _cells(line)
        if header is None:
            header = cells
        elif cells[0] == source["row"]:
            return numbers(cells[header.index(source["column"])])[pick]
    raise LookupError(f"{source['file']}: no row {source['row']!r}")


def refresh(results: Path, path: Path = FIGURES_FILE, root: Path = ROOT) -> list[str]:
    """Take the figures citing ``results`` from it (a benchmark just rewrote it) into
    ``figures.json``; the names of those that changed. A results file outside ``root`` (a
    test's) or one no figure cites changes nothing."""
    try:
        cited_as = results.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return []
    raw: dict[str, Any] = json.loads(path.read_text())
    changed = []
    for name, f in raw["figures"].items():
        if f["file"] != cited_as:
            continue
        try:
            value = read_cited({k: str(v) for k, v in f.items() if k != "value"}, root)
        except LookupError:
            continue  # a partial run without that row: the unit test names the figure
        if value != f["value"]:
            f["value"] = int(value) if value.is_integer() else value
            changed.append(name)
    if changed:
        path.write_text(json.dumps(raw, indent=2) + "\n")
    return changed
