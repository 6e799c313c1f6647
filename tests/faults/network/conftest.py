"""Fixtures of the network fault tests: ``net``, the broker with four proxied links (one for the
package's tests), and ``links``, cleared of faults before and after each test."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator

import pytest

from tests.faults.network.support import BASE, LINKS, Net
from tests.faults.proxy import Link
from tests.support import Broker


# One broker for all the network tests (their ports are fixed, and each start takes seconds).
@pytest.fixture(scope="package")
def net() -> Iterator[Net]:
    broker = Broker(f"127.0.0.1:{BASE}", BASE)
    listeners = ",".join(f"L{i}:{BASE + 2 + 2 * i}:{BASE + 3 + 2 * i}" for i in range(LINKS))
    os.environ["KAFKA_EXTRA_LISTENERS"] = listeners
    try:
        # Tried again: a port of the broker's can be held for a moment as the local end of some
        # program's outgoing connection when it lies in the ephemeral range (32768-60999 on
        # Linux), and the broker then fails to bind it ("Address already in use").
        for _ in range(3):
            up = broker.script("up", timeout=300)
            if up.returncode == 0 or "Address already in use" not in up.stderr:
                break
            time.sleep(3)
    finally:
        del os.environ["KAFKA_EXTRA_LISTENERS"]
    if up.returncode != 0:
        pytest.fail(f"cannot start the proxied broker:\n{up.stdout}\n{up.stderr}")
    for i in range(LINKS):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", BASE + 2 + 2 * i)) != 0:
                pytest.fail(
                    f"the broker on {BASE} has no listener L{i} on {BASE + 2 + 2 * i}: was it "
                    "started without KAFKA_EXTRA_LISTENERS (scripts/kafka-local.sh)? Stop it "
                    f"(KAFKA_PORT={BASE} scripts/kafka-local.sh down) and run again"
                )
    links = [
        Link(listen_port=BASE + 3 + 2 * i, target_port=BASE + 2 + 2 * i, seed=i).start()
        for i in range(LINKS)
    ]
    try:
        yield Net(broker, links)
    finally:
        for link in links:
            link.stop()
        broker.script("down")


@pytest.fixture
def links(net: Net) -> Iterator[list[Link]]:
    """The links, clear of faults and logs at the start of a test, and again after it."""

    def clear() -> None:
        for link in net.links:
            link.latency = link.jitter = 0.0
            link.rate = None
            link.on_request = None
            link.heal()
            link.txn_requests.clear()
            link.resets = link.connections = link.dropped_bytes = 0

    clear()
    yield net.links
    clear()
    for link in net.links:
        link.reset_all()
