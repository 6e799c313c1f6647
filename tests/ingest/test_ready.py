"""Liveness and readiness of the ingest service on a real broker that this test owns.

``GET /health`` (liveness) answers 200 while the process serves; ``GET /ready`` (readiness, for
load balancers) answers 503 while the producer cannot reach Kafka: a frozen broker (SIGSTOP,
its connections stay open and nothing answers) and a stopped one (connections refused). The
broker is started here on ports of its own, because freezing or stopping the shared test
broker would disturb every other test.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scripts.topic_admin import create_topics
from tests.ingest.support import IngestProcess, free_port
from tests.support import KAFKA_SCRIPT, Broker, unique_suffix

pytestmark = pytest.mark.integration


class OwnBroker(Broker):
    """A single-node broker with its own ports and data dir, for this test only."""

    def __init__(self, port: int, data_dir: Path) -> None:
        super().__init__(f"127.0.0.1:{port}", port)
        self.controller_port = free_port()
        self.data_dir = data_dir

    def script(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        env = dict(
            os.environ,
            KAFKA_PORT=str(self.port),
            KAFKA_CONTROLLER_PORT=str(self.controller_port),
            KAFKA_DATA_DIR=str(self.data_dir),
            KAFKA_HEAP_OPTS="-Xms256m -Xmx256m",
        )
        return subprocess.run(
            [str(KAFKA_SCRIPT), *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def pid(self) -> int:
        result = self.script("pid")
        assert result.returncode == 0, result.stderr
        return int(result.stdout.strip())


@pytest.fixture
def own_broker(tmp_path: Path) -> Iterator[OwnBroker]:
    broker = OwnBroker(free_port(), tmp_path / "kafka")
    started = broker.script("up", timeout=300)
    assert started.returncode == 0, started.stdout + started.stderr
    pid = broker.pid()
    try:
        yield broker
    finally:
        # A frozen broker cannot stop; the test itself stops it last, and once its JVM has
        # exited there is nothing to resume (`down` may return before or after that).
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
        broker.script("down")


def get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read())


def wait_for(url: str, status: int, timeout: float = 60) -> tuple[float, Any]:
    """Poll ``url`` until it answers ``status``; returns (seconds waited, body)."""
    started = time.monotonic()
    while True:
        got, body = get(url)
        if got == status:
            return time.monotonic() - started, body
        if time.monotonic() - started > timeout:
            raise AssertionError(f"{url} still answers {got} {body} after {timeout}s")
        time.sleep(0.2)


def test_ready_is_503_while_kafka_is_unreachable_and_health_stays_200(
    own_broker: OwnBroker, tmp_path: Path
) -> None:
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(own_broker.bootstrap, [topic], 4))
    service = IngestProcess(own_broker, topic, tmp_path / "ingest.log")
    service.start()
    try:
        service.wait_ready()
        status, body = get(service.url + "/ready")
        assert status == 200, body
        assert body == {"status": "ready", "topic": topic}

        pid = own_broker.pid()
        os.kill(pid, signal.SIGSTOP)  # frozen: connected, but nothing answers
        waited, body = wait_for(service.url + "/ready", 503, timeout=15)
        assert body["status"] == "unavailable" and own_broker.bootstrap in body["reason"]
        assert get(service.url + "/health") == (200, {"status": "ok"})
        os.kill(pid, signal.SIGCONT)
        wait_for(service.url + "/ready", 200)

        stopped = own_broker.script("down")
        assert stopped.returncode == 0, stopped.stderr
        waited, body = wait_for(service.url + "/ready", 503, timeout=15)
        assert body["status"] == "unavailable"
        assert get(service.url + "/health") == (200, {"status": "ok"})
        print(f"\n/ready: 503 {waited:.1f}s after the broker stopped: {body['reason']}")
    finally:
        service.stop()
