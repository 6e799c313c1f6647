"""The cluster tier: a dedicated KRaft controller and three brokers with Kafka 4.x's defaults
(scripts/kafka_cluster.py, on ``DEDUPE_TEST_CLUSTER_PORT``, default 19300: controller there,
brokers on the next three ports). The cluster is left running after the session, as the single
test broker is; ``KAFKA_CLUSTER_PORT=19300 python -m scripts.kafka_cluster down`` stops it.

Each test gets ``broker``: the whole cluster as a bootstrap list, waited on until every broker is
registered and no partition is under-replicated, so every fault meets a whole cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.kafka_cluster import Cluster
from tests.cluster.support import protocol_of
from tests.faults.conftest import REPORT, SCALE
from tests.reliability import Reliability
from tests.support import Broker, Names, delete_topics_after, unique_suffix

CLUSTER_PORT = int(os.environ.get("DEDUPE_TEST_CLUSTER_PORT", "19300"))


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    """A new cluster for every session: a broker restarted after a kill -9 recovers and
    re-replicates every partition it holds, so partitions left by earlier runs would slow
    every fault down (seen: over 500 partitions, a restart not whole after 240 s)."""
    c = Cluster(port=CLUSTER_PORT, proxied=True)
    c.wipe()
    c.up()
    return c


@pytest.fixture
def names(tmp_path: Path, cluster: Cluster) -> Iterator[Names]:
    """Fresh names per test (overrides tests/conftest.py), and the test's topics deleted after
    it, for the reason given at :func:`cluster`."""
    fresh = Names(unique_suffix(), tmp_path)
    yield fresh
    delete_topics_after(Broker(cluster.bootstrap, cluster.brokers[0].port), fresh)


@pytest.fixture
def broker(cluster: Cluster) -> Broker:
    """The cluster, once whole again (overrides the single broker of tests/conftest.py)."""
    cluster.start_stopped()
    cluster.wait_healthy(240)
    return Broker(cluster.bootstrap, cluster.brokers[0].port)


@pytest.fixture(scope="session")
def reliability(cluster: Cluster) -> Iterator[Reliability]:
    version = cluster.finalized("transaction.version")
    report = Reliability(
        "cluster",
        "Three brokers, Kafka's defaults (`make test-cluster`)",
        nodes=cluster.size,
        txn_version=f"{version} / {protocol_of(cluster)}",
    )
    yield report
    report.publish(REPORT, "Reliability report" if SCALE == 1 else f"Soak report ({SCALE}x)")
