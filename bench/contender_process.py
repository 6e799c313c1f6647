"""How the contender benchmark (bench/throughput.py) starts a contender: its options, topic
names, command line and environment, and its topics created and deleted."""

from __future__ import annotations

import os
import socket
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from bench.report import CONTENDERS, GROUP_WORKERS, WORKERS


@dataclass
class Names:
    tag: str

    @property
    def input(self) -> str:
        return f"{self.tag}-in"

    @property
    def output(self) -> str:
        return f"{self.tag}-out"

    @property
    def dlq(self) -> str:
        return f"{self.tag}-dlq"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def command(key: str, bootstrap: str, names: Names, partitions: int, state: Path) -> list[str]:
    module = CONTENDERS[key][0]
    if key == "f":
        ports = ",".join(str(free_port()) for _ in range(GROUP_WORKERS))
        group = [sys.executable, "-m", f"bench.contenders.{module}", "--web-ports", ports]
        return [*group, "--state-dir", str(state)]
    if key in WORKERS:
        return [sys.executable, "-m", "app", "worker", "-l", "info"]
    return [
        sys.executable,
        "-m",
        f"bench.contenders.{module}",
        "--bootstrap",
        bootstrap,
        "--input",
        names.input,
        "--output",
        names.output,
        "--partitions",
        str(partitions),
        "--state-dir",
        str(state),
        "--group",
        names.tag,
    ]


def environment(
    key: str,
    bootstrap: str,
    names: Names,
    partitions: int,
    state: Path,
    worker_settings: dict[str, str] | None = None,
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")}
    if key in WORKERS:
        env.update(worker_settings or {})
        env.update(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            DEDUPE_APP_ID=names.tag,
            DEDUPE_INPUT_TOPIC=names.input,
            DEDUPE_OUTPUT_TOPIC=names.output,
            DEDUPE_DLQ_TOPIC=names.dlq,
            DEDUPE_PARTITIONS=str(partitions),
            DEDUPE_DATA_DIR=str(state),
            DEDUPE_WEB_PORT=str(free_port()),
        )
    return env


def last_error(log: Path) -> str:
    """The last meaningful line of a contender's log (its exception, usually)."""
    if not log.exists():
        return ""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Exception" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""


def expiry_scans(log: Path) -> str:
    """What contender (h)'s expiry punctuator did, from its "kstreams-dedup: expiry-scan MS
    SCANNED DELETED" lines: the cost the key-value store pays for having no retention of its
    own ("" when it never ran)."""
    if not log.exists():
        return ""
    scans = [
        [int(x) for x in line.split()[2:5]]
        for line in log.read_text(errors="replace").splitlines()
        if line.startswith("kstreams-dedup: expiry-scan ")
    ]
    if not scans:
        return ""
    return (
        f"expiry punctuator: {len(scans)} scans (one per task each run), "
        f"{sum(s[0] for s in scans):,} ms in all, longest {max(s[0] for s in scans):,} ms, "
        f"{sum(s[1] for s in scans):,} ids read, {sum(s[2] for s in scans):,} deleted"
    )


@dataclass
class Options:
    bootstrap: str
    events: int
    partitions: int
    latency_events: int
    latency_rate: float
    start_timeout: float
    idle_timeout: float
    work_dir: Path
    keep_topics: bool
    #: Where py-spy profiles of the worker contenders go (``--py-spy``); None: not profiled.
    py_spy: Path | None = None
    #: Extra ``DEDUPE_*`` settings for the worker contenders (``--worker-setting``).
    worker_settings: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    #: Replication factor of every topic of the run (``--replication``; 3 on a cluster).
    replication: int = 1
    #: The chart's file name, beside the results file.
    chart_name: str = "results.png"
