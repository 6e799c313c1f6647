"""The fault tiers' published report (docs/reliability.md, docs/soak.md): every fault test
records its figures, and each tier rewrites its own section of the report at the end of its
session.

A section keeps the rows of faults that did not run in this session (with the time of the run
that measured them): a run of a subset (one file, ``-k``) must not shrink the published report.
A row's time is its run's: ``DEDUPE_REPORT_RUN`` when set (``make test`` sets it once for its
lanes, which run parts of one tier side by side and publish into the same section), else the
time it is published; a section's header counts the rows of the latest run.
"""

from __future__ import annotations

import copy
import fcntl
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

INTRO = """\
Written by the fault tiers: `make test-faults` (one broker; its network faults, through the
fault proxy, in a section of their own) and `make test-cluster` (three brokers with Kafka's
defaults) each rewrite their own section of docs/reliability.md; `make soak` runs them at 10x
the events and writes docs/soak.md. Every run injects real faults into real worker and broker
processes on one machine, then checks the clean topic with read_committed (each expected id
exactly once, value bytes of its first copy), the dead-letter topic, the committed offsets and
open transactions. Time to recover: from the last fault until every input record was committed.

Brokers are formatted with Kafka's defaults, so the workers run transactions v2 (KIP-890), as on
every new Kafka 4.x cluster: every row runs on it (cluster / worker version 2 / v2). The rows
whose fault meets the commit also run on the old protocol, on a broker formatted with
`transaction.version=1` (1 / v1), or with v1 forced on the three brokers (2 / v1); `make soak`
runs every row on both. A section keeps the rows of faults that did not run in its latest
session, from the run that measured them.
"""

HEADER = (
    "| fault | nodes | txn version (cluster / worker) | runs | events | faults injected "
    "| duplicates | missing | time to recover (max) | run |\n" + "|---" * 10 + "|"
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
    txn_version: str = ""


class Reliability:
    """One tier's rows; ``publish`` writes them into the tier's section of ``path``."""

    def __init__(self, section: str, title: str, nodes: int, txn_version: str) -> None:
        self.section = section
        self.title = title
        self.nodes = nodes
        self.txn_version = txn_version
        self.rows: list[Row] = []

    def with_version(self, txn_version: str) -> Reliability:
        """This report, recording rows under ``txn_version`` (the rows are shared)."""
        view = copy.copy(self)
        view.txn_version = txn_version
        return view

    def record(
        self,
        fault: str,
        *,
        events: int,
        injected: int,
        duplicates: int,
        missing: int,
        recover_s: float,
        txn_version: str = "",
    ) -> None:
        """``txn_version``: this row's, when the tier runs rows on both protocols (else the
        tier's); a fault keeps one row per version."""
        version = txn_version or self.txn_version
        self.rows.append(Row(fault, 1, events, injected, duplicates, missing, recover_s, version))

    def lines(self, when: str) -> dict[str, str]:
        """The table rows of this session, by fault; ``when``: the run's time."""
        merged: dict[str, Row] = {}
        for r in self.rows:
            key = _key(r.fault, self.nodes, r.txn_version)
            m = merged.setdefault(key, Row(r.fault, 0, 0, 0, 0, 0, 0.0, r.txn_version))
            m.runs += 1
            m.events += r.events
            m.injected += r.injected
            m.duplicates += r.duplicates
            m.missing += r.missing
            m.recover_s = max(m.recover_s, r.recover_s)
        return {
            key: f"| {m.fault} | {self.nodes} | {m.txn_version} | {m.runs} | {m.events:,} "
            f"| {m.injected} | {m.duplicates} | {m.missing} | {m.recover_s:.0f} s | {when} |"
            for key, m in merged.items()
        }

    def publish(self, path: Path, heading: str) -> None:
        if not self.rows:
            return
        path.parent.mkdir(exist_ok=True)
        # Two tiers run side by side in `make test` and each publishes its section of the same
        # file: the lock keeps one from writing back a copy without the other's new rows.
        with path.open("a+") as f:
            fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            merged = self._merged(f.read(), heading)
            f.seek(0)
            f.truncate()
            f.write(merged)

    def _merged(self, text: str, heading: str) -> str:
        sections = dict(re.findall(r"<!-- section: (\w+) -->\n(.*?)<!-- /section -->", text, re.S))
        outside = re.sub(r"<!-- section: \w+ -->\n.*?<!-- /section -->", "", text, flags=re.S)
        if re.search(r"^\| [A-Z]\d", outside, re.M):
            # A table of the layout before sections: rewriting the file would drop its rows.
            raise ValueError(
                "the report has fault rows outside a <!-- section: NAME --> block; move them "
                "into their tier's section (faults or cluster) before a run publishes into it"
            )
        now = os.environ.get("DEDUPE_REPORT_RUN") or time.strftime(
            "%Y-%m-%d %H:%M UTC", time.gmtime()
        )
        rows = _rows_of(sections.get(self.section, ""))
        rows.update(self.lines(now))
        ran = sum(line.endswith(f"| {now} |") for line in rows.values())
        sections[self.section] = (
            f"## {self.title}\n\nLatest run {now}, {platform.machine()}, {os.cpu_count()} cores: "
            f"{ran} of the {len(rows)} rows below.\n\n{HEADER}\n"
            + "\n".join(rows[k] for k in sorted(rows, key=_fault_order))
            + "\n\n"
        )
        body = "".join(
            f"<!-- section: {name} -->\n{sections[name]}<!-- /section -->\n\n"
            for name in sorted(sections)
        )
        return f"# {heading}\n\n{INTRO}\n{body}".rstrip() + "\n"


def _key(fault: str, nodes: int | str, txn_version: str) -> str:
    """A row's identity: the fault on its cluster shape and transaction version."""
    return f"{fault} | {nodes} | {txn_version}"


def _rows_of(section: str) -> dict[str, str]:
    """The rows of an earlier section, by :func:`_key` (each says when it ran)."""
    return {
        _key(*line[2:].split(" | ", 3)[:3]): line
        for line in section.splitlines()
        if line.startswith("| ") and not line.startswith("| fault ")
    }


def _fault_order(fault: str) -> tuple[int, str]:
    return (len(fault.split()[0]), fault)
