"""The fault tier's report: every fault test records its figures, and the session writes them
to docs/reliability.md (one row per fault: runs, events, faults injected, duplicates, missing,
time to recover). ``DEDUPE_FAULT_SCALE`` multiplies the events of every run (``make soak``
sets 10, and its table goes to docs/soak.md)."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SCALE = int(os.environ.get("DEDUPE_FAULT_SCALE", "1"))
#: The fault tier's report; the soak (a larger scale) writes its own, so neither run replaces
#: the other's table.
REPORT = (
    Path(__file__).resolve().parents[2] / "docs" / ("reliability.md" if SCALE == 1 else "soak.md")
)


@dataclass
class Row:
    fault: str
    runs: int
    events: int
    injected: int
    duplicates: int
    missing: int
    recover_s: float


class Reliability:
    def __init__(self) -> None:
        self.rows: list[Row] = []

    def record(
        self,
        fault: str,
        *,
        events: int,
        injected: int,
        duplicates: int,
        missing: int,
        recover_s: float,
    ) -> None:
        self.rows.append(Row(fault, 1, events, injected, duplicates, missing, recover_s))

    def table(self) -> str:
        merged: dict[str, Row] = {}
        for r in self.rows:
            m = merged.setdefault(r.fault, Row(r.fault, 0, 0, 0, 0, 0, 0.0))
            m.runs += 1
            m.events += r.events
            m.injected += r.injected
            m.duplicates += r.duplicates
            m.missing += r.missing
            m.recover_s = max(m.recover_s, r.recover_s)
        lines = [
            "| fault | runs | events | faults injected | duplicates | missing "
            "| time to recover (max) |",
            "|---|---|---|---|---|---|---|",
        ]
        for m in sorted(merged.values(), key=lambda m: (len(m.fault.split()[0]), m.fault)):
            lines.append(
                f"| {m.fault} | {m.runs} | {m.events:,} | {m.injected} | {m.duplicates} | "
                f"{m.missing} | {m.recover_s:.0f} s |"
            )
        return "\n".join(lines)


@pytest.fixture(scope="session")
def reliability() -> Iterator[Reliability]:
    report = Reliability()
    yield report
    if not report.rows:
        return
    REPORT.parent.mkdir(exist_ok=True)
    REPORT.write_text(
        ("# Reliability report\n\n" if SCALE == 1 else f"# Soak report ({SCALE}x)\n\n")
        + "Written by the fault tier (`make test-faults` writes docs/reliability.md; `make soak`\n"
        "runs it at 10x the events and writes docs/soak.md). Every run\n"
        "injects real faults into real worker and broker processes on one machine, then checks\n"
        "the clean topic with read_committed (each expected id exactly once, value bytes of its\n"
        "first copy), the dead-letter topic, the committed offsets and open transactions.\n"
        "Time to recover: from the last fault until every input record was committed.\n\n"
        f"Run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, scale {SCALE}x, "
        f"{platform.machine()}, {os.cpu_count()} cores.\n\n" + report.table() + "\n"
    )
