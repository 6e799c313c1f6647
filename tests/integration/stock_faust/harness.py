"""Run the stock Faust app of :mod:`stock_app` as a subprocess and look at what it left behind."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from aiokafka import AIOKafkaProducer

from tests.support import ROOT, unique_suffix


@dataclass
class StockNames:
    suffix: str = field(default_factory=unique_suffix)

    @property
    def app_id(self) -> str:
        return f"stock-{self.suffix}"

    @property
    def input_topic(self) -> str:
        return f"stock-in-{self.suffix}"

    @property
    def output_topic(self) -> str:
        return f"stock-out-{self.suffix}"

    @property
    def changelog_topic(self) -> str:
        return f"{self.app_id}-seen-changelog"


async def produce(
    bootstrap: str, topic: str, keys: Iterable[bytes]
) -> dict[bytes, tuple[int, int]]:
    """Send one record per key (value = key); returns key -> (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futs = {k: await producer.send(topic, key=k, value=k) for k in keys}
        return {k: ((md := await f).partition, md.offset) for k, f in futs.items()}
    finally:
        await producer.stop()


@dataclass
class StockWorker:
    """``python -m tests.integration.stock_faust.stock_app worker`` with its own log file."""

    bootstrap: str
    names: StockNames
    data_dir: Path
    log_path: Path
    partitions: int = 2
    extra_env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith(("STOCK_", "DEDUPE_"))},
            "STOCK_BROKER": self.bootstrap,
            "STOCK_APP_ID": self.names.app_id,
            "STOCK_INPUT": self.names.input_topic,
            "STOCK_OUTPUT": self.names.output_topic,
            "STOCK_PARTITIONS": str(self.partitions),
            "STOCK_DATADIR": str(self.data_dir),
            **self.extra_env,
        }

    def start(self, **extra_env: str) -> None:
        assert not self.alive(), "worker already running"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            log.write(f"\n===== start {self.starts} =====\n".encode())
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.stock_faust.stock_app",
                "worker",
                "--without-web",  # the CLI's default --with-web overrides web_enabled=False
                "-l",
                "info",
            ],
            env={**self.env(), **extra_env},
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        self.starts += 1

    def start_ready(self, timeout: float = 60, **extra_env: str) -> None:
        """Start and wait until Faust logs "Ready" or the process exits after its first partition
        assignment (a test hook may kill it that early; the caller looks at what it left).

        A worker that exits before it was ever assigned a partition (seen once: a transient
        broker connection error while Faust creates its leader topic) has processed nothing and
        opened no transaction, so it is simply started again, at most twice."""
        for attempt in range(3):
            self.start(**extra_env)
            deadline = time.monotonic() + timeout
            while "[^Worker]: Ready" not in self.this_start_log() and self.alive():
                if time.monotonic() > deadline:
                    raise AssertionError(f"worker not ready after {timeout}s:\n{self.tail()}")
                time.sleep(0.2)
            if self.alive() or "_on_partitions_assigned" in self.this_start_log():
                return
            if attempt == 2:
                raise AssertionError(f"worker exited while starting:\n{self.tail()}")
            time.sleep(1.0)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self, sig: int = signal.SIGKILL, wait: float = 60) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(30)
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def this_start_log(self) -> str:
        return self.log_text().rsplit(f"===== start {self.starts - 1} =====", 1)[-1]

    def wait_for_log(self, needle: str, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.this_start_log():
            if not self.alive():
                raise AssertionError(f"worker exited waiting for {needle!r}:\n{self.tail()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {needle!r} after {timeout}s:\n{self.tail()}")
            time.sleep(0.2)

    def tail(self, n: int = 6000) -> str:
        return self.log_text()[-n:]


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


#: Where Faust's RocksDB store keeps its changelog offset (``faust.stores.rocksdb.Store``).
OFFSET_KEY = b"__faust\0offset__"


def read_store(data_dir: Path, table: str, partition: int) -> dict[bytes, bytes]:
    """Every key of one partition database of a stopped worker's RocksDB table, read-only."""
    from rocksdict import AccessType, Options, Rdict

    path = data_dir / "v1" / "tables" / f"{table}-{partition}.db"
    assert path.is_dir(), f"no RocksDB database at {path}"
    db = Rdict(str(path), Options(raw_mode=True), access_type=AccessType.read_only())
    try:
        return dict(db.items())
    finally:
        db.close()


def ends_of(positions: Mapping[bytes, tuple[int, int]]) -> dict[int, int]:
    """Per input partition, the offset after the last record produced (what a drained group has)."""
    ends: dict[int, int] = {}
    for partition, offset in positions.values():
        ends[partition] = max(ends.get(partition, 0), offset + 1)
    return ends


async def group_offsets(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    """The offsets ``group`` has committed for ``topic``, by partition."""
    from scripts.topic_reader import committed_offsets

    return {
        tp.partition: o
        for tp, o in (await committed_offsets(bootstrap, group)).items()
        if tp.topic == topic
    }


def wait_drained(worker: StockWorker, ends: Mapping[int, int], timeout: float = 60) -> None:
    """Block until the worker's group has committed every input record up to ``ends``."""

    def drained() -> bool:
        if not worker.alive():
            raise AssertionError(f"worker exited before draining:\n{worker.tail()}")
        got = run(group_offsets(worker.bootstrap, worker.names.app_id, worker.names.input_topic))
        return all(got.get(p, 0) >= end for p, end in ends.items())

    wait_until(drained, timeout, f"group {worker.names.app_id} to commit up to {dict(ends)}")


def transactional_ids(log: str) -> set[str]:
    """The transactional ids Faust's producers registered, as logged by aiokafka."""
    return set(re.findall(r"Discovered coordinator \d+ for transactional id (\S+)", log))


async def init_producer_ids(bootstrap: str, tids: Iterable[str]) -> None:
    """InitProducerId for each transactional id, exactly as a restarted worker would do first:
    it fences the previous producer with that id and aborts its open transaction."""
    for tid in sorted(tids):
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
        await producer.start()
        await asyncio.sleep(0)
        await producer.stop()


def recovery_table(log: str, title: str) -> dict[int, int]:
    """A per-partition table of the last recovery Faust logged in ``log``: ``"Highwater -
    Active"`` (changelog highwaters, -1: unknown) or ``"Reading Starts At - Active"`` (the offset
    recovery starts reading from, -1: the beginning)."""
    table = log.rsplit(title, 1)[1].split("\n[", 1)[0]
    rows = re.findall(r"^\|\s*\S+\s*\|\s*(\d+)\s*\|\s*(-?\d+)\s*\|", table, re.M)
    assert rows, f"no {title!r} table in:\n{table}"
    return {int(p): int(o) for p, o in rows}
