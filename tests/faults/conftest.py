"""The fault tier's brokers, protocols and report.

Every row runs on transactions v2, the protocol every new Kafka 4.x cluster finalizes: the tier's
broker (tests/conftest.py) is formatted with Kafka's defaults. The rows that exercise the
commit (marked ``both_protocols``) also run on the old protocol in every run, on a second
broker formatted with ``transaction.version=1`` (as a cluster upgraded from Kafka 3.x keeps it,
where workers run aiokafka's own flow); ``make soak`` (``DEDUPE_FAULT_SCALE`` above 1) runs every
row on both. Each test gets ``protocol`` ("v2" or "v1") and the ``broker`` of that protocol.

Every fault test records its figures, and the session writes them to its section of
docs/reliability.md (tests/reliability.py; one row per fault and protocol: runs, events,
faults injected, duplicates, missing, time to recover). ``DEDUPE_FAULT_SCALE`` multiplies the
events of every run (``make soak`` sets 10, and its table goes to docs/soak.md)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.eos.txn_protocol import cluster_features
from app.settings import Settings
from tests.conftest import TEST_PORT
from tests.reliability import Reliability
from tests.support import Broker, Names, delete_topics_after

SCALE = int(os.environ.get("DEDUPE_FAULT_SCALE", "1"))
#: The fault tier's report; the soak (a larger scale) writes its own, so neither run replaces
#: the other's table.
REPORT = (
    Path(__file__).resolve().parents[2] / "docs" / ("reliability.md" if SCALE == 1 else "soak.md")
)
#: The broker of the v1 runs (its controller on the next port), formatted with
#: :data:`V1_FORMAT_ARGS`; left running after the session, as the tier's broker is.
V1_PORT = int(os.environ.get("DEDUPE_TEST_KAFKA_V1_PORT", str(TEST_PORT + 20)))
V1_FORMAT_ARGS = "--feature transaction.version=1"
#: The finalized ``transaction.version`` each protocol's runs need of their broker.
CLUSTER_VERSION = {"v2": 2, "v1": 1}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Give every test that uses a broker its protocols (the module docstring), unless it
    says them itself."""
    if "protocol" not in metafunc.fixturenames:
        return
    if any("protocol" in m.args[0] for m in metafunc.definition.iter_markers("parametrize")):
        return
    both = SCALE > 1 or metafunc.definition.get_closest_marker("both_protocols") is not None
    if metafunc.definition.get_closest_marker("v2_only") is not None:
        both = False
    metafunc.parametrize("protocol", ["v2", "v1"] if both else ["v2"])


def finalized_transaction_version(broker: Broker) -> int:
    settings = Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap})
    return asyncio.run(cluster_features(settings)).transaction_version


def checked(broker: Broker, protocol: str) -> Broker:
    """``broker``, failing the session unless it finalized the version ``protocol`` needs (a
    data dir formatted by an older kafka-local.sh keeps what it was formatted with)."""
    found = finalized_transaction_version(broker)
    if found != CLUSTER_VERSION[protocol]:
        pytest.fail(
            f"the broker on {broker.port} finalized transaction.version={found}, the {protocol} "
            f"runs need {CLUSTER_VERSION[protocol]}: it was formatted otherwise; reformat it "
            f"(KAFKA_PORT={broker.port} scripts/kafka-local.sh wipe) and run again"
        )
    return broker


@pytest.fixture(scope="session")
def broker_v2(test_broker: Broker) -> Broker:
    """The tier's broker (tests/conftest.py), checked: Kafka's defaults, transactions v2."""
    return checked(test_broker, "v2")


@pytest.fixture(scope="session")
def broker_v1() -> Broker:
    """The broker of the v1 runs, started when not running and checked."""
    v1 = Broker(f"127.0.0.1:{V1_PORT}", V1_PORT)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_FORMAT_ARGS", V1_FORMAT_ARGS)
        result = v1.script("up", timeout=300)
    if result.returncode != 0:
        pytest.fail(f"cannot start the v1 test broker:\n{result.stdout}\n{result.stderr}")
    return checked(v1, "v1")


@pytest.fixture
def protocol(request: pytest.FixtureRequest) -> str:
    """The transaction protocol of this run ("v2" or "v1": :func:`pytest_generate_tests`)."""
    value: str = request.param
    return value


@pytest.fixture
def broker(protocol: str, names: Names, request: pytest.FixtureRequest) -> Iterator[Broker]:
    """The broker of this run's protocol (overrides tests/conftest.py's); the test's topics are
    deleted after it (F6 and F7 restart this broker: see ``delete_topics_after``)."""
    chosen: Broker = request.getfixturevalue("broker_v2" if protocol == "v2" else "broker_v1")
    yield chosen
    delete_topics_after(chosen, names)


@pytest.fixture(scope="session")
def reliability_report() -> Iterator[Reliability]:
    report = Reliability("faults", "One broker (`make test-faults`)", nodes=1, txn_version="")
    yield report
    report.publish(REPORT, "Reliability report" if SCALE == 1 else f"Soak report ({SCALE}x)")


@pytest.fixture
def reliability(reliability_report: Reliability, protocol: str) -> Reliability:
    """The tier's report, its rows labelled with this run's protocol (cluster / worker)."""
    return reliability_report.with_version(f"{CLUSTER_VERSION[protocol]} / {protocol}")
