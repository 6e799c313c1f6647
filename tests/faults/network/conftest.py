"""Fixtures of the network fault tests: ``net``, the broker of this run's protocol with four
proxied links (one for the package's tests), and ``links``, cleared of faults before and after
each test. A broker per protocol (tests/faults/conftest.py): Kafka's defaults on
``support.BASE``, ``transaction.version=1`` on ``support.BASE_V1``; each is started the first
time a test needs it and stopped at the end of the package."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from tests.faults.conftest import REPORT, SCALE, V1_FORMAT_ARGS, checked
from tests.faults.network.support import BASE, BASE_V1, LINKS, Net
from tests.faults.proxy import Link
from tests.reliability import Reliability
from tests.support import Broker, Names, delete_topics_after


def start_net(base: int, protocol: str) -> Net:
    """The broker on ``base`` with its proxied links (their ports follow it), started."""
    broker = Broker(f"127.0.0.1:{base}", base)
    listeners = ",".join(f"L{i}:{base + 2 + 2 * i}:{base + 3 + 2 * i}" for i in range(LINKS))
    with pytest.MonkeyPatch.context() as env:
        env.setenv("KAFKA_EXTRA_LISTENERS", listeners)
        if protocol == "v1":
            env.setenv("KAFKA_FORMAT_ARGS", V1_FORMAT_ARGS)
        # Tried again: a port of the broker's can be held for a moment as the local end of some
        # program's outgoing connection when it lies in the ephemeral range (32768-60999 on
        # Linux), and the broker then fails to bind it ("Address already in use").
        for _ in range(3):
            up = broker.script("up", timeout=300)
            if up.returncode == 0 or "Address already in use" not in up.stderr:
                break
            time.sleep(3)
    if up.returncode != 0:
        pytest.fail(f"cannot start the proxied broker:\n{up.stdout}\n{up.stderr}")
    for i in range(LINKS):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", base + 2 + 2 * i)) != 0:
                pytest.fail(
                    f"the broker on {base} has no listener L{i} on {base + 2 + 2 * i}: was it "
                    "started without KAFKA_EXTRA_LISTENERS (scripts/kafka-local.sh)? Stop it "
                    f"(KAFKA_PORT={base} scripts/kafka-local.sh down) and run again"
                )
    checked(broker, protocol)
    links = [
        Link(listen_port=base + 3 + 2 * i, target_port=base + 2 + 2 * i, seed=i).start()
        for i in range(LINKS)
    ]
    return Net(broker, links)


# One broker per protocol for all the network tests (their ports are fixed, and each start
# takes seconds).
@pytest.fixture(scope="package")
def nets() -> Iterator[dict[str, Net]]:
    started: dict[str, Net] = {}
    yield started
    for net in started.values():
        for link in net.links:
            link.stop()
        net.broker.script("down")


@pytest.fixture
def net(protocol: str, nets: dict[str, Net]) -> Net:
    if protocol not in nets:
        nets[protocol] = start_net(BASE if protocol == "v2" else BASE_V1, protocol)
    return nets[protocol]


@pytest.fixture
def broker(net: Net, names: Names) -> Iterator[Broker]:
    """This run's proxied broker (overrides the tier's: the package needs no other, and runs
    beside the rest of the tier in ``make test``, which restarts that one); the test's topics
    are deleted after it."""
    yield net.broker
    delete_topics_after(net.broker, names)


@pytest.fixture(scope="package")
def reliability_report() -> Iterator[Reliability]:
    """The package's own section of the report: it runs in a lane of its own in ``make test``
    (overrides the tier's)."""
    report = Reliability(
        "network",
        "One broker, its links through the fault proxy (`make test-faults`: tests/faults/network)",
        nodes=1,
        txn_version="",
    )
    yield report
    report.publish(REPORT, "Reliability report" if SCALE == 1 else f"Soak report ({SCALE}x)")


@pytest.fixture
def links(net: Net) -> Iterator[list[Link]]:
    """The links, clear of faults and logs at the start of a test, and again after it."""

    for link in net.links:
        link.clear()
    yield net.links
    for link in net.links:
        link.clear()
    for link in net.links:
        link.reset_all()
