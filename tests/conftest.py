"""Fixtures shared by every tier: the real broker (started if needed) and fresh names per test."""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Broker, Names, unique_suffix
from tests.workers import Worker

#: Tests use their own broker port so they never touch a broker of `make run` on 9092.
TEST_PORT = int(os.environ.get("DEDUPE_TEST_KAFKA_PORT", "19092"))


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture(scope="session")
def broker(test_broker: Broker) -> Broker:
    """The broker a test runs against: the session's test broker (a tier may choose another:
    tests/faults, tests/cluster)."""
    return test_broker


@pytest.fixture(scope="session")
def test_broker() -> Broker:
    """The real Kafka broker on 127.0.0.1:$DEDUPE_TEST_KAFKA_PORT, formatted with Kafka's
    defaults (scripts/kafka-local.sh), started when not running.

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


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """Keep each phase's report on the test item (``item.rep_call``) for fixtures' teardown."""
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture
def workers(broker: Broker, names: Names, request: pytest.FixtureRequest) -> Iterator[list[Worker]]:
    """A list to append workers to; every one still running is killed after the test. When
    the test failed, each worker still running first prints every thread's stack and asyncio
    task (SIGUSR1, Faust's mode) into its log, and the log's tail goes to the test's report:
    a worker that hung in CI says where."""
    started: list[Worker] = []
    yield started
    report = getattr(request.node, "rep_call", None)
    alive = [w for w in started if w.alive()]
    if report is not None and report.failed and alive:
        for w in alive:
            assert w.proc is not None
            w.proc.send_signal(signal.SIGUSR1)
        time.sleep(3)
        for w in alive:
            tail = "\n".join(w.log_text().splitlines()[-400:])
            print(
                f"\n===== worker {w.index} (still running at the failure): log tail =====\n{tail}"
            )
    for w in started:
        w.kill()
