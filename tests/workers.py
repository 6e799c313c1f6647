"""Test harness: real worker processes, and waiting for them to drain their input.

Workers run as ``python -m app worker`` subprocesses (the Procfile's command), so tests can
SIGKILL, SIGTERM and restart them exactly as an operator or a crash would.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiokafka.structs import TopicPartition

from scripts.topic_reader import committed_offsets, end_offsets, read_topic
from tests.support import Broker, Names, Runtime

#: The test workers' DEDUPE_TRANSACTION_TIMEOUT (seconds).
WORKER_TRANSACTION_TIMEOUT = 10.0


def signal_and_wait(proc: subprocess.Popen[bytes] | None, sig: int, wait: float) -> int | None:
    """Send ``sig`` to a running process and return its exit code (SIGKILL after ``wait`` s)."""
    if proc is None or proc.poll() is not None:
        return None if proc is None else proc.returncode
    proc.send_signal(sig)
    try:
        return proc.wait(wait)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait(30)


@dataclass
class Worker:
    """One worker process; ``start`` again after a kill restarts it on the same data dir."""

    broker: Broker
    names: Names
    index: int = 0
    partitions: int = 4
    extra_env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    runtime: Runtime = field(default_factory=Runtime)

    @property
    def data_dir(self) -> Path:
        return self.names.data_root / f"worker-{self.index}"

    @property
    def web_port(self) -> int:
        # Tiers that run side by side in `make test` get distinct bases (the Makefile's lanes).
        base = int(os.environ.get("DEDUPE_TEST_WEB_PORT_BASE", "17000"))
        return base + (os.getpid() % 500) * 4 + self.index

    @property
    def log_path(self) -> Path:
        return self.names.data_root / f"worker-{self.index}.log"

    def env(self) -> dict[str, str]:
        n = self.names
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")},
            "KAFKA_BOOTSTRAP_SERVERS": self.broker.bootstrap,
            "DEDUPE_APP_ID": n.app_id,
            "DEDUPE_INPUT_TOPIC": n.input_topic,
            "DEDUPE_OUTPUT_TOPIC": n.output_topic,
            "DEDUPE_DLQ_TOPIC": n.dlq_topic,
            "DEDUPE_PARTITIONS": str(self.partitions),
            "DEDUPE_DATA_DIR": str(self.data_dir),
            "DEDUPE_WEB_PORT": str(self.web_port),
            "DEDUPE_SESSION_TIMEOUT": "3s",
            "DEDUPE_TRANSACTION_TIMEOUT": f"{WORKER_TRANSACTION_TIMEOUT:g}s",
            **self.extra_env,
        }

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "worker already running"
        self.data_dir.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        log.write(f"\n===== start {self.starts} =====\n".encode())
        log.flush()
        self.proc = self.runtime.popen(["app", "worker", "-l", "info"], self.env(), log)
        self.starts += 1

    def kill(self, sig: int = signal.SIGKILL, wait: float = 60) -> int | None:
        return signal_and_wait(self.proc, sig, wait)

    def wait_ready(self, timeout: float = 120) -> float:
        """Block until this start of the worker logged Faust's "Ready" (topics exist by then)."""
        return self._wait_for_this_start("[^Worker]: Ready", timeout)

    def wait_assigned(self, timeout: float = 120) -> float:
        """Block until this start of the worker took partitions (started their transactional
        producers): a fault injected after it meets a worker that owns work, not one that is
        still booting or joining the group."""
        return self._wait_for_this_start("starting transactional producers", timeout)

    def _wait_for_this_start(self, line: str, timeout: float) -> float:
        started = time.monotonic()
        while line not in self.last_start_log():
            if not self.alive():
                raise AssertionError(f"worker exited while starting:\n{self.log_text()[-4000:]}")
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"worker not past {line!r} after {timeout}s:\n{self.log_text()[-4000:]}"
                )
            time.sleep(0.2)
        return time.monotonic() - started

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def last_start_log(self) -> str:
        """The log of the latest start only (``start`` writes a marker before each)."""
        return self.log_text().rsplit("===== start", 1)[-1]


async def drained(broker: Broker, names: Names, client: Mapping[str, Any] | None = None) -> bool:
    """True when the group has committed past every record of the input and repartition topics.
    ``client``: aiokafka's security arguments (tests/security)."""
    committed = await committed_offsets(broker.bootstrap, names.app_id, client=client)
    ends = await end_offsets(broker.bootstrap, names.input_topic, client=client)
    assert ends, f"no partitions for {names.input_topic}"
    for p, end in ends.items():
        if end and committed.get(TopicPartition(names.input_topic, p), 0) < end:
            return False
    last: dict[int, int] = {}
    for rec in await read_topic(broker.bootstrap, names.repartition_topic, client=client):
        last[rec.partition] = rec.offset
    return all(
        committed.get(TopicPartition(names.repartition_topic, p), 0) > off
        for p, off in last.items()
    )


def wait_drained(
    broker: Broker,
    names: Names,
    timeout: float,
    workers: list[Worker],
    client: Mapping[str, Any] | None = None,
) -> float:
    """Block until :func:`drained`; returns the seconds waited. Fails if every worker died."""
    started = time.monotonic()
    while True:
        if asyncio.run(drained(broker, names, client)):
            return time.monotonic() - started
        if workers and not any(w.alive() for w in workers):
            logs = "\n".join(w.log_text()[-4000:] for w in workers)
            raise AssertionError(f"all workers exited before draining:\n{logs}")
        if time.monotonic() - started > timeout:
            raise AssertionError(f"not drained after {timeout}s:\n{stuck_report(workers)}")
        time.sleep(1.0)


def stuck_report(workers: list[Worker]) -> str:
    """What a stuck run needs for its diagnosis, before the test's directory is gone: each
    worker's warnings and errors over its whole log, its log's end, its ``/stats`` and, when
    alive, the Python stacks of its threads (py-spy)."""
    parts = []
    for w in workers:
        text = w.log_text()
        loud = [ln for ln in text.splitlines() if "[WARNING]" in ln or "[ERROR]" in ln]
        parts.append(f"===== worker {w.index} (alive: {w.alive()}) warnings and errors =====")
        parts += loud[-60:]
        parts.append(f"===== worker {w.index} log end =====\n{text[-4000:]}")
        if w.alive() and w.proc is not None:
            parts.append(f"===== worker {w.index} /stats =====\n{get(w, '/stats')[1]}")
            spy = subprocess.run(
                [str(Path(sys.executable).parent / "py-spy"), "dump", "--pid", str(w.proc.pid)],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
            parts.append(f"===== worker {w.index} stacks =====\n{spy.stdout}{spy.stderr}")
    return "\n".join(parts)


_NEXT_PORT: dict[int, int] = {}


def port_in_range(base: int, span: int) -> int:
    """A port of ``base`` .. ``base + span - 1`` nothing listens on, taken in turn: each tier
    keeps its own fixed range below the kernel's ephemeral ports (32768 and up), where a port
    handed out by the kernel could also be taken by any client's outgoing connection."""
    for _ in range(span):
        offset = _NEXT_PORT.get(base, 0)
        _NEXT_PORT[base] = (offset + 1) % span
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", base + offset))
            except OSError:
                continue
            return base + offset
    raise RuntimeError(f"no free port in {base}..{base + span - 1}")


def get(worker: Worker, path: str) -> tuple[int, Any]:
    """``GET path`` on the worker's web server: (status, JSON body, or its text when not JSON);
    (0, None) while nothing answers (not listening yet, connection reset, timeout)."""
    url = f"http://127.0.0.1:{worker.web_port}{path}"
    try:
        with urllib.request.urlopen(url, timeout=15) as r:
            body = r.read()
            status = r.status
    except urllib.error.HTTPError as err:
        body, status = err.read(), err.code
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, None
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body.decode()
