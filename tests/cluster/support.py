"""What the cluster's fault tests ask the brokers: who leads a partition, who coordinates a
transactional id or a group, and whether a transaction was left hanging."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections import Counter

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import CoordinationType

from scripts.kafka_cluster import KAFKA_SCRIPT, Cluster
from scripts.kafka_cluster_nodes import Node
from tests.support import Broker, Names
from tests.workers import Worker

#: Replication 3 for the topics the workers create (Kafka's broker default would do the same;
#: said outright so the test does not depend on it).
CLUSTER_ENV = {"DEDUPE_REPLICATION_FACTOR": "3"}


def worker_env(protocol: str) -> dict[str, str]:
    """A cluster worker's settings; ``protocol`` "auto" lets the worker pick (v2 on this
    cluster), "v1" or "v2" forces one."""
    return {**CLUSTER_ENV, "DEDUPE_TRANSACTION_PROTOCOL": protocol}


def two_workers(
    broker: Broker, names: Names, workers: list[Worker], protocol: str = "auto"
) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i, extra_env=worker_env(protocol))
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready(180)


def bounce(cluster: Cluster, node: Node, down_s: float = 5.0, *, whole: bool = True) -> None:
    """kill -9 ``node``, leave it down ``down_s`` seconds, start it again and (``whole``) wait
    until every broker is registered and no partition is under-replicated."""
    node.signal(signal.SIGKILL)
    time.sleep(down_s)
    node.start()
    if whole:
        cluster.wait_healthy(240)


def leaders(bootstrap: str, topics: list[str]) -> Counter[int]:
    """How many partitions of ``topics`` each broker leads."""

    async def ask() -> Counter[int]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            return Counter(
                p["leader"] for t in await admin.describe_topics(topics) for p in t["partitions"]
            )
        finally:
            await admin.close()

    return asyncio.run(ask())


def coordinator(bootstrap: str, key: str, *, transactional: bool) -> int:
    """The broker id coordinating transactional id (or group) ``key`` (FindCoordinator)."""

    async def ask() -> int:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            kind = CoordinationType.TRANSACTION if transactional else CoordinationType.GROUP
            return int(await admin._client.coordinator_lookup(kind, key))
        finally:
            await admin.close()

    return asyncio.run(ask())


def hanging(cluster: Cluster) -> list[str]:
    """``kafka-transactions find-hanging`` on every broker: the transactions a broker still
    holds open past the transaction timeout (Kafka's own check for KIP-890's hazard)."""
    found = []
    for b in cluster.brokers:
        result = subprocess.run(
            [
                *(str(KAFKA_SCRIPT), "transactions", "--bootstrap-server", cluster.bootstrap),
                *("find-hanging", "--broker-id", str(b.id)),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        lines = [ln for ln in result.stdout.splitlines() if ln.strip()]
        found += [f"broker {b.id}: {ln}" for ln in lines[1:]]  # after the header line
    return found


def protocol_of(cluster: Cluster, setting: str = "auto") -> str:
    """The transaction protocol a worker with ``DEDUPE_TRANSACTION_PROTOCOL=setting`` runs on
    the cluster (app/eos/txn_protocol.py): with "auto", v2 where the cluster finalized
    transaction.version 2."""
    if setting != "auto":
        return setting
    return "v2" if cluster.finalized("transaction.version") >= 2 else "v1"


def txn_version(cluster: Cluster, setting: str = "auto") -> str:
    """The report's column: the cluster's finalized version / the protocol the worker ran."""
    return f"{cluster.finalized('transaction.version')} / {protocol_of(cluster, setting)}"


def assert_protocol(logs: list[str], protocol: str) -> None:
    """Every worker said it runs ``protocol``: the report's label is what ran, not assumed."""
    for text in logs:
        assert f"transactions run protocol {protocol}" in text, text[-3000:]
