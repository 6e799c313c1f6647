"""Safe topic defaults on the single-node test broker (app/admin/topic_safety.py,
app/admin/topics.py):

- with every setting at its default ("auto") the worker still creates its topics with
  replication 1 there, writes min.insync.replicas=1 and unclean election off on each, starts,
  and logs no warning about them: the single node stays the default of ``make run``;
- a seen-ids changelog created beforehand with ``cleanup.policy=delete`` makes it refuse to
  start, naming the topic, the value found, the one wanted and the command that fixes it.

Three brokers: tests/cluster/test_topic_defaults.py."""

from __future__ import annotations

import asyncio

from scripts.topic_admin import create_topics
from tests.integration.test_pipelines import refusal
from tests.support import Broker, Names, topic_state
from tests.workers import Worker


def test_single_node_defaults_create_unreplicated_topics_and_start(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    log = worker.log_text()
    assert "topic settings that weaken exactly-once" not in log
    assert "refusing" not in log
    for topic in names.worker_topics:
        assert f"{topic!r} (4 partitions, replication 1, min.insync.replicas 1)" in log, topic
        state = asyncio.run(topic_state(broker.bootstrap, topic))
        assert state.replicas == [1, 1, 1, 1], topic
        assert state.configs["min.insync.replicas"] == ("1", True), topic
        assert state.configs["unclean.leader.election.enable"] == ("false", True), topic
    changelog = asyncio.run(topic_state(broker.bootstrap, names.changelog_topic))
    assert changelog.configs["cleanup.policy"] == ("compact", True)


def test_a_changelog_that_deletes_refuses_the_start_naming_the_fix(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    asyncio.run(
        create_topics(
            broker.bootstrap, [names.changelog_topic], 4, config={"cleanup.policy": "delete"}
        )
    )
    worker = Worker(broker, names)
    workers.append(worker)
    log = refusal(worker)
    assert "refusing to start: 1 topic setting(s) break exactly-once (1 in all;" in log
    assert (
        f"[REFUSED] changelog topic {names.changelog_topic!r}: cleanup.policy is 'delete', "
        "wanted 'compact' (a changelog that deletes old segments loses seen ids" in log
    )
    assert (
        "fix: kafka-configs.sh --bootstrap-server ... --alter --entity-type topics "
        f"--entity-name {names.changelog_topic} --add-config cleanup.policy=compact" in log
    )
