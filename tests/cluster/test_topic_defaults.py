"""Safe topic defaults on three brokers (app/topic_safety.py; the single node's side is
tests/integration/test_topic_safety.py):

- with every setting at its default the worker creates its six topics with replication 3 and
  ``min.insync.replicas=2`` set on each topic (the brokers' own default is 2 as well, so the
  test asks where the value comes from), unclean election off, and starts without a warning;
- an input topic that exists with replication 1 stops it, naming the topic and both ways out;
  ``DEDUPE_REPLICATION_FACTOR=1`` set explicitly lets it start, with a warning.

When a cluster already runs on the tier's ports (another session's), these tests only add and
delete topics of their own there; otherwise they start the tier's cluster (conftest.py)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from scripts.kafka_cluster import Cluster
from scripts.kafka_cluster_nodes import health, listening
from tests.cluster.conftest import CLUSTER_PORT
from tests.integration.test_pipelines import refusal
from tests.support import Broker, Names, Worker, create_topic, topic_state

PARTITIONS = 4


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> Broker:
    """Three registered brokers and no under-replicated partition (overrides the tier's
    ``broker``, which starts the cluster). A cluster already running on the tier's ports is
    used as it is: nothing started, stopped or reconfigured."""
    if not listening(CLUSTER_PORT):
        cluster: Cluster = request.getfixturevalue("cluster")
        cluster.wait_healthy(240)
        return Broker(cluster.bootstrap, cluster.brokers[0].port)
    bootstrap = ",".join(f"127.0.0.1:{CLUSTER_PORT + n}" for n in (1, 2, 3))
    deadline = time.monotonic() + 300
    while (state := health(bootstrap)).brokers < 3 or state.under_replicated:
        if time.monotonic() > deadline:
            pytest.fail(f"the running cluster did not become whole in 300 s: {state}")
        time.sleep(1)
    return Broker(bootstrap, CLUSTER_PORT + 1)


@pytest.fixture
def own_topics(broker: Broker, names: Names) -> Iterator[Names]:
    """Fresh names; every topic named with them is deleted afterwards, so a shared cluster
    keeps no unreplicated topic of these tests into another session's broker faults."""
    yield names

    async def delete() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            mine = [t for t in await admin.list_topics() if names.suffix in t]
            if mine:
                await admin.delete_topics(mine)
        finally:
            await admin.close()

    asyncio.run(delete())


def topics(names: Names) -> list[str]:
    return [
        names.input_topic,
        names.repartition_topic,
        names.changelog_topic,
        f"{names.app_id}-producer_seqs-changelog",
        names.output_topic,
        names.dlq_topic,
    ]


def test_defaults_create_replication_3_and_min_insync_2(
    broker: Broker, own_topics: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, own_topics, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    log = worker.log_text()
    assert "topic settings that weaken exactly-once" not in log
    for topic in topics(own_topics):
        assert f"{topic!r} ({PARTITIONS} partitions, replication 3, min.insync.replicas 2)" in log
        state = asyncio.run(topic_state(broker.bootstrap, topic))
        assert state.replicas == [3] * PARTITIONS, topic
        assert state.configs["min.insync.replicas"] == ("2", True), topic
        assert state.configs["unclean.leader.election.enable"] == ("false", True), topic


def test_an_unreplicated_topic_refuses_unless_replication_1_is_set_explicitly(
    broker: Broker, own_topics: Names, workers: list[Worker]
) -> None:
    # min.insync.replicas 1: the brokers' default of 2 would refuse it for a reason of its own
    one = {"min.insync.replicas": "1"}
    asyncio.run(create_topic(broker.bootstrap, own_topics.input_topic, PARTITIONS, one))
    first = Worker(broker, own_topics, partitions=PARTITIONS)
    workers.append(first)
    log = refusal(first)
    assert "refusing to start: 1 topic setting(s) break exactly-once" in log
    assert (
        f"[REFUSED] input topic {own_topics.input_topic!r}: replication factor is 1, wanted "
        "3 (3 brokers) (one broker's disk holds the only copy); fix: raise it with "
        "kafka-reassign-partitions.sh (docs/operations.md, production checklist), or set "
        "DEDUPE_REPLICATION_FACTOR=1 to run unreplicated on purpose" in log
    )

    explicit = Worker(
        broker,
        own_topics,
        index=1,
        partitions=PARTITIONS,
        extra_env={"DEDUPE_REPLICATION_FACTOR": "1"},
    )
    workers.append(explicit)
    explicit.start()
    explicit.wait_ready()
    log = explicit.log_text()
    assert "topic settings that weaken exactly-once (1 in all;" in log
    assert (
        f"[warning] input topic {own_topics.input_topic!r}: replication factor is 1, wanted 1 "
        "(3 brokers)" in log
    )
    # the topics the refused worker created keep the replication auto gave them
    state = asyncio.run(topic_state(broker.bootstrap, own_topics.output_topic))
    assert state.replicas == [3] * PARTITIONS
