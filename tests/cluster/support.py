"""What the cluster's fault tests ask the brokers: who leads a partition, who coordinates a
transactional id or a group, and whether a transaction was left hanging."""

from __future__ import annotations

import asyncio
import subprocess
from collections import Counter

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.client import CoordinationType

from scripts.kafka_cluster import KAFKA_SCRIPT, Cluster


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


def protocol_of(cluster: Cluster) -> str:
    """The transaction protocol a worker with ``DEDUPE_TRANSACTION_PROTOCOL=auto`` runs on the
    cluster (app/eos/txn_protocol.py): v2 where the cluster finalized transaction.version 2."""
    return "v2" if cluster.finalized("transaction.version") >= 2 else "v1"


def assert_protocol(logs: list[str], protocol: str) -> None:
    """Every worker said it runs ``protocol``: the report's label is what ran, not assumed."""
    for text in logs:
        assert f"transactions run protocol {protocol}" in text, text[-3000:]
