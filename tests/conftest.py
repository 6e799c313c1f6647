"""Fixtures shared by every tier: the real broker (started if needed) and fresh names per test."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Broker, Names, Worker, unique_suffix

#: Tests use their own broker port so they never touch a broker of `make run` on 9092.
TEST_PORT = int(os.environ.get("DEDUPE_TEST_KAFKA_PORT", "19092"))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def broker() -> Broker:
    """The real Kafka broker on 127.0.0.1:$DEDUPE_TEST_KAFKA_PORT, started when not running.

    It is left running after the session (``make kafka-down KAFKA_PORT=19092`` stops it), so
    repeated test runs do not pay its start-up.
    """
    b = Broker(f"127.0.0.1:{TEST_PORT}", TEST_PORT)
    result = b.script("up", timeout=300)
    if result.returncode != 0:
        pytest.fail(f"cannot start the test broker:\n{result.stdout}\n{result.stderr}")
    assert _listening(TEST_PORT)
    return b


@pytest.fixture
def names(tmp_path: Path) -> Names:
    return Names(unique_suffix(), tmp_path)


@pytest.fixture
def workers(broker: Broker, names: Names) -> Iterator[list[Worker]]:
    """A list to append workers to; every one still running is killed after the test."""
    started: list[Worker] = []
    yield started
    for w in started:
        w.kill()
