"""Brokers formatted with a given Kafka transaction version (``transaction.version``), for the
tests of the transaction protocol (app/eos/txn_protocol.py).

The session's test broker (``broker``, tests/conftest.py) is formatted with Kafka's defaults
(scripts/kafka-local.sh), but may be one a developer formatted long ago; these two are formatted
afresh for the session in their own data dirs, so what they finalized is known: Kafka's
defaults (``transaction.version=2`` on Kafka 4.x) on 127.0.0.1:19400 and
``--feature transaction.version=1`` on 127.0.0.1:19410. Each is stopped at the end of the
session.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import Broker

#: Port of the broker formatted with Kafka's default features (transaction.version 2).
TV2_PORT = 19400
#: Port of the broker formatted with transaction.version 1 (the old protocol).
TV1_PORT = 19410
#: The format arguments of a broker on the old transaction protocol.
TV1_FORMAT_ARGS = "--feature transaction.version=1"


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _script(broker: Broker, format_args: str | None, data_dir: Path, *args: str) -> str:
    """Run scripts/kafka-local.sh for ``broker`` with its own data dir and format arguments
    (None: the script's default), set only for this call; its output, or the test fails."""
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_DATA_DIR", str(data_dir))
        if format_args is None:
            env.delenv("KAFKA_FORMAT_ARGS", raising=False)
        else:
            env.setenv("KAFKA_FORMAT_ARGS", format_args)
        result = broker.script(*args, timeout=300)
    if result.returncode != 0:
        pytest.fail(
            f"kafka-local.sh {' '.join(args)} on {broker.port}:\n{result.stdout}\n{result.stderr}"
        )
    return result.stdout + result.stderr


def _formatted_broker(port: int, format_args: str | None, data_dir: Path) -> Iterator[Broker]:
    """A broker on ``port`` with a fresh data dir formatted with ``format_args`` (None: the
    script's default); stopped afterwards."""
    if _listening(port):
        pytest.fail(
            f"port {port} is in use: these tests format their own broker there "
            f"(stop the other one: KAFKA_PORT={port} scripts/kafka-local.sh down)"
        )
    broker = Broker(f"127.0.0.1:{port}", port)
    try:
        _script(broker, format_args, data_dir, "up")
        yield broker
    finally:
        _script(broker, format_args, data_dir, "down")


@pytest.fixture(scope="session")
def tv2_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker formatted with Kafka's defaults: ``transaction.version=2``."""
    yield from _formatted_broker(TV2_PORT, "", tmp_path_factory.mktemp("kafka-tv2"))


@pytest.fixture(scope="session")
def tv1_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker formatted with ``transaction.version=1``."""
    yield from _formatted_broker(TV1_PORT, TV1_FORMAT_ARGS, tmp_path_factory.mktemp("kafka-tv1"))
