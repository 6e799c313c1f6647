"""Harness of the ingest tier: the ingest service as a real process, topics, HTTP helpers.

``IngestProcess`` runs ``python -m ingest`` (the Procfile's ``web:`` command) on a free port,
so tests talk to it over real HTTP exactly as a Segment SDK would, and can SIGKILL it.
"""

from __future__ import annotations

import asyncio
import base64
import gzip
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scripts.topic_reader import end_offsets
from tests.support import Broker, Runtime
from tests.workers import port_in_range, signal_and_wait

WRITE_KEY = "test-write-key"


def free_port() -> int:
    """A port of the ingest tier's own range (19600-19699; the browser tier's are 19505-19511)."""
    return port_in_range(19600, 100)


def basic(key: str) -> str:
    """The Authorization header a Segment SDK sends: Basic base64("<key>:")."""
    return "Basic " + base64.b64encode(f"{key}:".encode()).decode()


def json_headers(key: str | None = WRITE_KEY, **extra: str) -> dict[str, str]:
    headers = {"Content-Type": "application/json", **extra}
    if key is not None:
        headers["Authorization"] = basic(key)
    return headers


def body_of(doc: Any, *, gzipped: bool = False) -> bytes:
    raw = json.dumps(doc).encode()
    return gzip.compress(raw) if gzipped else raw


def records_in(broker: Broker, topic: str) -> int:
    """How many records ``topic`` holds (sum of its end offsets)."""
    return sum(asyncio.run(end_offsets(broker.bootstrap, topic)).values())


@dataclass
class IngestProcess:
    """``python -m ingest`` on a free port; ``start`` again after a kill restarts it."""

    broker: Broker
    topic: str
    log_path: Path
    write_keys: str = WRITE_KEY
    port: int = field(default_factory=free_port)
    extra_env: Mapping[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    runtime: Runtime = field(default_factory=Runtime)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        return {
            **{k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")},
            "KAFKA_BOOTSTRAP_SERVERS": self.broker.bootstrap,
            "DEDUPE_INPUT_TOPIC": self.topic,
            "DEDUPE_WRITE_KEYS": self.write_keys,
            "DEDUPE_INGEST_HOST": "127.0.0.1",
            "PORT": str(self.port),
            **self.extra_env,
        }

    def start(self) -> None:
        assert self.proc is None or self.proc.poll() is not None, "ingest already running"
        log = self.log_path.open("ab")
        self.proc = self.runtime.popen(["ingest"], self.env(), log)

    def wait_ready(self, timeout: float = 60) -> float:
        """Block until ``GET /health`` answers 200."""
        started = time.monotonic()
        while True:
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"ingest exited while starting:\n{self.log_text()[-4000:]}")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        return time.monotonic() - started
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() - started > timeout:
                raise AssertionError(f"ingest not ready after {timeout}s:\n{self.log_text()}")
            time.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, wait: float = 30) -> int | None:
        return signal_and_wait(self.proc, sig, wait)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
