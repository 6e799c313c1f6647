"""Shared by the network fault tests (tests/faults/network/): the proxied broker's ports, the
links seen as brokers (``Net``), a worker started through a link, and what the proxies saw."""

from __future__ import annotations

import os
from dataclasses import dataclass

from tests.conftest import TEST_PORT
from tests.faults.kafka_frames import (
    END_TXN,
    TxnRequest,
)
from tests.faults.proxy import Link
from tests.support import Broker, Names
from tests.workers import WORKER_TRANSACTION_TIMEOUT, Worker

BASE = int(os.environ.get("DEDUPE_NETFAULT_KAFKA_PORT", str(TEST_PORT + 10)))
#: The proxied broker of the v1 runs (transaction.version=1), and its links after it.
BASE_V1 = int(os.environ.get("DEDUPE_NETFAULT_KAFKA_V1_PORT", str(TEST_PORT + 30)))

LINKS = 4

SESSION_TIMEOUT = 3.0  # tests.workers.Worker's DEDUPE_SESSION_TIMEOUT

TRANSACTION_TIMEOUT = WORKER_TRANSACTION_TIMEOUT


@dataclass
class Net:
    broker: Broker  # the broker itself (feeders, the verifier)
    links: list[Link]

    def via(self, i: int) -> Broker:
        """The broker as seen through link ``i`` (what a proxied client is given)."""
        return Broker(f"127.0.0.1:{self.links[i].listen_port}", self.broker.port)


def proxied(net: Net, names: Names, workers: list[Worker], i: int, **env: str) -> Worker:
    worker = Worker(net.via(i), names, index=i, extra_env=env)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    return worker


def proxy_line(links: list[Link]) -> str:
    return " | ".join(
        f"L{i}: connections={k.connections} resets={k.resets} dropped={k.dropped_bytes:,}B"
        for i, k in enumerate(links)
        if k.connections
    )


def commits(log: list[TxnRequest]) -> list[TxnRequest]:
    return [t for t in log if t.api_key == END_TXN and t.committed and t.forwarded_at]
