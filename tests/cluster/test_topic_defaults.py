"""Safe topic defaults on three brokers (app/admin/topic_safety.py; the single node's side is
tests/integration/test_topic_safety.py):

- with every setting at its default the worker creates its six topics with replication 3 and
  ``min.insync.replicas=2`` set on each topic (the brokers' own default is 2 as well, so the
  test asks where the value comes from), unclean election off, and starts without a warning;
- an input topic that exists with replication 1 stops it, naming the topic and both ways out;
  ``DEDUPE_REPLICATION_FACTOR=1`` set explicitly lets it start, with a warning."""

from __future__ import annotations

import asyncio

from scripts.topic_admin import create_topics
from tests.integration.test_pipelines import refusal
from tests.support import Broker, Names, topic_state
from tests.workers import Worker

PARTITIONS = 4


def test_defaults_create_replication_3_and_min_insync_2(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    log = worker.log_text()
    assert "topic settings that weaken exactly-once" not in log
    for topic in names.worker_topics:
        assert f"{topic!r} ({PARTITIONS} partitions, replication 3, min.insync.replicas 2)" in log
        state = asyncio.run(topic_state(broker.bootstrap, topic))
        assert state.replicas == [3] * PARTITIONS, topic
        assert state.configs["min.insync.replicas"] == ("2", True), topic
        assert state.configs["unclean.leader.election.enable"] == ("false", True), topic


def test_an_unreplicated_topic_refuses_unless_replication_1_is_set_explicitly(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    # min.insync.replicas 1: the brokers' default of 2 would refuse it for a reason of its own
    one = {"min.insync.replicas": "1"}
    asyncio.run(create_topics(broker.bootstrap, [names.input_topic], PARTITIONS, config=one))
    first = Worker(broker, names, partitions=PARTITIONS)
    workers.append(first)
    log = refusal(first)
    assert "refusing to start: 1 topic setting(s) break exactly-once" in log
    assert (
        f"[REFUSED] input topic {names.input_topic!r}: replication factor is 1, wanted "
        "3 (3 brokers) (one broker's disk holds the only copy); fix: raise it with "
        "kafka-reassign-partitions.sh (docs/operations.md, production checklist), or set "
        "DEDUPE_REPLICATION_FACTOR=1 to run unreplicated on purpose" in log
    )

    explicit = Worker(
        broker,
        names,
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
        f"[warning] input topic {names.input_topic!r}: replication factor is 1, wanted 1 "
        "(3 brokers)" in log
    )
    # the topics the refused worker created keep the replication auto gave them
    state = asyncio.run(topic_state(broker.bootstrap, names.output_topic))
    assert state.replicas == [3] * PARTITIONS
