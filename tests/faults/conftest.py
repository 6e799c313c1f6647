"""The fault tier's report: every fault test records its figures, and the session writes them
to its section of docs/reliability.md (tests/reliability.py; one row per fault: runs, events,
faults injected, duplicates, missing, time to recover). ``DEDUPE_FAULT_SCALE`` multiplies the
events of every run (``make soak`` sets 10, and its table goes to docs/soak.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.reliability import Reliability

SCALE = int(os.environ.get("DEDUPE_FAULT_SCALE", "1"))
#: The fault tier's report; the soak (a larger scale) writes its own, so neither run replaces
#: the other's table.
REPORT = (
    Path(__file__).resolve().parents[2] / "docs" / ("reliability.md" if SCALE == 1 else "soak.md")
)


@pytest.fixture(scope="session")
def reliability() -> Iterator[Reliability]:
    report = Reliability("faults", "One broker (`make test-faults`)", nodes=1, txn_version="1 / v1")
    yield report
    report.publish(REPORT, "Reliability report" if SCALE == 1 else f"Soak report ({SCALE}x)")
