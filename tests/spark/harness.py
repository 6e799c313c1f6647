"""Test harness of the Spark tier: the lake job as a real process, and what its files say.

``LakeJob`` runs ``python -m spark.job`` (the Procfile's command) in its own process group, so a
test can SIGKILL the Python driver and its Spark JVM together, exactly like a machine crash, and
start it again on the same lake and checkpoints.

The readers below look at the job's files directly (local filesystem, no Spark), the way the
checkpoint and the tables' logs define them:

- ``<checkpoint>/offsets/<n>``: the Kafka offsets batch n covers, logged before it runs;
- ``<checkpoint>/commits/<n>``: written after batch n was committed to the sink;
- ``<table>/_delta_log/<version>.json``: the files a Delta commit added (and removed);
- ``<table>/_spark_metadata/<n>[.compact]``: the files batch n added to a Parquet table.

:func:`read_without_spark` reads a Delta table the way any other engine would: delta-rs.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from deltalake import DeltaTable

from tests.support import Broker, Runtime

_LOG_FILE = re.compile(r"^\d+(\.compact)?$")


def _log_ids(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit())


def committed_offsets(checkpoint: Path) -> dict[int, int]:
    """Per partition, the offset up to which the query has committed (empty before batch 0)."""
    commits = _log_ids(checkpoint / "commits")
    if not commits:
        return {}
    lines = (checkpoint / "offsets" / str(commits[-1])).read_text().splitlines()
    # "v1", the batch metadata, then one line per source: {"<topic>": {"<partition>": offset}}
    source: dict[str, dict[str, int]] = json.loads(lines[2])
    (partitions,) = source.values()
    return {int(p): off for p, off in partitions.items()}


def batch_in_flight(checkpoint: Path) -> bool:
    """True when a batch was planned (offsets logged) and not committed yet."""
    return max(_log_ids(checkpoint / "offsets"), default=-1) > max(
        _log_ids(checkpoint / "commits"), default=-1
    )


def committed_batches(checkpoint: Path) -> int:
    return len(_log_ids(checkpoint / "commits"))


def delta_added_files(table: Path) -> set[str]:
    """Names of the files any commit of the Delta table added (now in the table, or replaced
    later by a compaction): every file a committed batch wrote."""
    names: set[str] = set()
    log = table / "_delta_log"
    if not log.is_dir():
        return names
    for entry in sorted(log.glob("*.json")):
        for line in entry.read_text().splitlines():
            action = json.loads(line) if line.strip() else {}
            if "add" in action:
                names.add(Path(unquote(action["add"]["path"])).name)
    return names


def read_without_spark(table: Path) -> list[str]:
    """The events table's messageIds as delta-rs reads them (no Spark, no JVM): the current
    version through the Delta log, as pandas, DuckDB or Polars would read it."""
    arrow = DeltaTable(str(table)).to_pyarrow_table(columns=["messageId"])
    ids: list[str] = arrow.column("messageId").to_pylist()
    return ids


def table_file_count(table: Path) -> int:
    """Files in the Delta table's current version (delta-rs)."""
    return len(DeltaTable(str(table)).file_uris())


def sink_files(table: Path) -> set[str]:
    """Names of the files the table's log lists as committed: for Delta, every file a commit
    added; for Parquet, the file sink's log."""
    if (table / "_delta_log").is_dir():
        return delta_added_files(table)
    log = table / "_spark_metadata"
    names: set[str] = set()
    if not log.is_dir():
        return names
    for entry in log.iterdir():
        if not _LOG_FILE.match(entry.name):
            continue
        for line in entry.read_text().splitlines()[1:]:
            if line.strip():
                record = json.loads(line)
                if record.get("action", "add") == "add":
                    names.add(Path(urlparse(record["path"]).path).name)
    return names


def data_files(table: Path) -> set[str]:
    """Names of the data files on disk below ``table`` (hidden and ``_`` entries are not data)."""
    if not table.is_dir():
        return set()
    return {
        p.name
        for p in table.rglob("*")
        if p.is_file()
        and not any(part.startswith(("_", ".")) for part in p.relative_to(table).parts)
    }


def uncommitted_files(table: Path) -> set[str]:
    """Data files of micro-batches not committed (yet, or ever: an attempt that was killed).
    The disk is listed before the log is read, so a file committed meanwhile is not counted."""
    on_disk = data_files(table)
    return on_disk - sink_files(table)


#: The jobs' metrics ports: a fixed range of the tier's (two jobs can run side by side), one per
#: job built in this process, in turn.
METRICS_PORTS = itertools.cycle(
    range(BASE := int(os.environ.get("DEDUPE_TEST_SPARK_METRICS_PORT", "19520")), BASE + 20)
)


@dataclass
class LakeJob:
    """One lake job process; ``start`` again after a kill restarts it on the same lake."""

    broker: Broker
    topic: str
    lake: Path
    extra_env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    metrics_port: int = field(default_factory=lambda: next(METRICS_PORTS))
    runtime: Runtime = field(default_factory=Runtime)

    @property
    def events_table(self) -> Path:
        return self.lake / "events"

    @property
    def counts_table(self) -> Path:
        return self.lake / "event_counts"

    @property
    def events_checkpoint(self) -> Path:
        return self.lake / "_checkpoints" / "events"

    @property
    def counts_checkpoint(self) -> Path:
        return self.lake / "_checkpoints" / "event_counts"

    @property
    def log_path(self) -> Path:
        return self.lake.parent / f"{self.lake.name}-job.log"

    def env(self) -> dict[str, str]:
        inherited = ("DEDUPE_", "SPARK_", "PYSPARK_")
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(inherited)},
            "KAFKA_BOOTSTRAP_SERVERS": self.broker.bootstrap,
            "DEDUPE_OUTPUT_TOPIC": self.topic,
            "DEDUPE_LAKE_DIR": str(self.lake),
            "DEDUPE_SPARK_TRIGGER_INTERVAL": "500ms",
            "DEDUPE_SPARK_WATERMARK": "1h",
            "DEDUPE_SPARK_SHUFFLE_PARTITIONS": "2",
            "DEDUPE_SPARK_DRIVER_MEMORY": "768m",
            "DEDUPE_SPARK_METRICS_PORT": str(self.metrics_port),
            **self.extra_env,
        }

    def start(self) -> None:
        assert not self.alive(), "job already running"
        self.lake.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        log.write(f"\n===== start {self.starts} =====\n".encode())
        log.flush()
        # its own process group: the driver and its JVM
        self.proc = self.runtime.popen(["spark.job"], self.env(), log, start_new_session=True)
        self.starts += 1

    def kill(self) -> None:
        """SIGKILL the Python driver and the Spark JVM at once (a crash of the machine)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)

    def stop(self, timeout: float = 60) -> int:
        """SIGTERM (a graceful stop); returns the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"job ignored SIGTERM:\n{self.log_text()[-4000:]}") from None
        # the JVM exits with its driver; make sure nothing of the group is left
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        return self.proc.returncode

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def caught_up(self, ends: Mapping[int, int]) -> bool:
        """Both queries committed every offset up to ``ends`` (read_committed end offsets)."""
        for checkpoint in (self.events_checkpoint, self.counts_checkpoint):
            done = committed_offsets(checkpoint)
            if any(end and done.get(p, 0) < end for p, end in ends.items()):
                return False
        return True

    def wait_caught_up(self, ends: Mapping[int, int], timeout: float) -> float:
        """Block until :meth:`caught_up`; returns the seconds waited. Fails if the job died."""
        started = time.monotonic()
        while not self.caught_up(ends):
            if not self.alive():
                raise AssertionError(f"the job exited:\n{self.log_text()[-6000:]}")
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"not caught up with {dict(ends)} after {timeout}s "
                    f"(events at {committed_offsets(self.events_checkpoint)}, counts at "
                    f"{committed_offsets(self.counts_checkpoint)}):\n{self.log_text()[-6000:]}"
                )
            time.sleep(0.5)
        return time.monotonic() - started

    def wait_batches(self, at_least: int, timeout: float) -> None:
        """Block until the events query committed ``at_least`` batches in all."""
        started = time.monotonic()
        while committed_batches(self.events_checkpoint) < at_least:
            if not self.alive():
                raise AssertionError(f"the job exited:\n{self.log_text()[-6000:]}")
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"no batch {at_least} in {timeout}s:\n{self.log_text()[-6000:]}"
                )
            time.sleep(0.1)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """The samples a job serves on ``GET /metrics``, by (name, sorted labels)."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
