"""Two pipelines on one cluster: an app id's group and seen ids belong to one input topic.

The consumer group and the changelog are named from ``DEDUPE_APP_ID`` alone. A second pipeline
(another input topic) started with the first one's app id would share its group and its seen
ids, and drop its own events as repeats of the first pipeline's; with another partition count
it would stop on a partition-count message about a changelog it never meant to use. The worker
must refuse to start instead, naming both input topics and the setting to change, while a
restart of the first pipeline (same app id, same input topic) still starts.
"""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from scripts.streams import build_stream, produce
from scripts.topic_admin import create_topics
from scripts.topic_reader import committed_offsets, read_topic
from scripts.verify import check
from tests.support import Broker, Names, unique_suffix
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4


async def topics(broker: Broker) -> set[str]:
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        return set(await admin.list_topics())
    finally:
        await admin.close()


def refusal(worker: Worker) -> str:
    """Start ``worker``, which must exit non-zero within 60 s; returns its log."""
    worker.start()
    assert worker.proc is not None
    code = worker.proc.wait(60)
    assert code != 0, worker.log_text()[-4000:]
    log = worker.log_text()
    assert "[^Worker]: Ready" not in log
    return log


def test_a_second_pipeline_with_the_first_ones_app_id_refuses_to_start(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    stream = build_stream(300, 0.1, seed=22)
    first = Worker(broker, names, partitions=PARTITIONS)
    workers.append(first)
    first.start()
    first.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, timeout=120, workers=[first])
    assert first.kill(signal.SIGTERM) == 0

    # Pipeline B: its own input, output and dead-letter topics, the same events (so the same
    # messageIds), and the first pipeline's app id.
    other = Names(unique_suffix(), tmp_path / "other")
    asyncio.run(create_topics(broker.bootstrap, [other.input_topic], PARTITIONS))
    asyncio.run(produce(broker.bootstrap, other.input_topic, stream.records))
    shared = {"DEDUPE_APP_ID": names.app_id}
    for index, partitions in ((1, PARTITIONS), (2, PARTITIONS + 2)):
        second = Worker(broker, other, partitions=partitions, index=index, extra_env=shared)
        workers.append(second)
        log = refusal(second)
        assert f"DEDUPE_APP_ID={names.app_id!r}" in log
        assert f"DEDUPE_INPUT_TOPIC={other.input_topic!r}" in log
        assert f"committed offsets for {names.input_topic!r}" in log
        assert "DEDUPE_PARTITIONS is" not in log  # not the partition-count message
    # B stopped before it joined the group or created a topic.
    committed = asyncio.run(committed_offsets(broker.bootstrap, names.app_id))
    assert {tp.topic for tp in committed} == {names.input_topic, names.repartition_topic}
    assert other.output_topic not in asyncio.run(topics(broker))

    # The first pipeline restarts as before, and B with an app id of its own forwards every one
    # of its events, although A forwarded the same messageIds.
    first.start()
    first.wait_ready()
    own = Worker(broker, other, partitions=PARTITIONS, index=3)
    workers.append(own)
    own.start()
    own.wait_ready()
    wait_drained(broker, other, timeout=120, workers=[own])
    report = check(
        other.output_topic,
        asyncio.run(read_topic(broker.bootstrap, other.output_topic)),
        {m.encode(): v for m, v in stream.unique.items()},
    )
    assert report.exactly_once, report.line()
    assert report.total == len(stream.unique) == 300
    assert first.alive()
