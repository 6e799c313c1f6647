"""The cluster tier: a dedicated KRaft controller and three brokers with Kafka 4.x's defaults
(scripts/kafka_cluster.py, on ``DEDUPE_TEST_CLUSTER_PORT``, default 19300: controller there,
brokers on the next three ports). The cluster is left running after the session, as the single
test broker is; ``KAFKA_CLUSTER_PORT=19300 python -m scripts.kafka_cluster down`` stops it.

Each test gets ``broker``: the whole cluster as a bootstrap list, waited on until every broker is
registered and no partition is under-replicated, so every fault meets a whole cluster."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from scripts.kafka_cluster import Cluster
from tests.faults.conftest import REPORT, SCALE
from tests.reliability import Reliability
from tests.support import Broker

CLUSTER_PORT = int(os.environ.get("DEDUPE_TEST_CLUSTER_PORT", "19300"))


@pytest.fixture(scope="session")
def cluster() -> Cluster:
    c = Cluster(port=CLUSTER_PORT)
    c.up()
    return c


@pytest.fixture
def broker(cluster: Cluster) -> Broker:
    """The cluster, once whole again (overrides the single broker of tests/conftest.py)."""
    cluster.wait_healthy(240)
    return Broker(cluster.bootstrap, cluster.brokers[0].port)


@pytest.fixture(scope="session")
def reliability(cluster: Cluster) -> Iterator[Reliability]:
    version = cluster.finalized("transaction.version")
    report = Reliability(
        "cluster",
        "Three brokers, Kafka's defaults (`make test-cluster`)",
        nodes=cluster.size,
        txn_version=f"{version} / v1",
    )
    yield report
    report.publish(REPORT, "Reliability report" if SCALE == 1 else f"Soak report ({SCALE}x)")
