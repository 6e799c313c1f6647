"""The Spark job on real processes: aborted transactions on the clean topic never reach the lake,
and the offsets that hold no readable record (commit and abort markers, aborted records, also
at the end of a partition) neither stall nor fail the job.

Each test has its own topics (``names``), lake and checkpoints (``tmp_path``).
"""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession

from scripts.streams import OutRecord, Stream, make_event
from scripts.topic_admin import create_topics
from scripts.topic_reader import read_topic
from spark.audit import audit_events
from spark.lake import read_table
from tests.spark.harness import (
    LakeJob,
)
from tests.spark.pipeline_support import clean_ends, transaction
from tests.support import Broker, Names

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def segment_events(prefix: str, n: int, seed: int) -> Stream:
    rng = random.Random(seed)
    records, unique = [], {}
    for i in range(n):
        message_id, value = make_event(rng, i, 1_790_000_000_000)
        message_id = f"{prefix}-{message_id}"
        doc = json.loads(value)
        doc["messageId"] = message_id
        value = json.dumps(doc, separators=(",", ":")).encode()
        records.append(OutRecord(message_id, message_id.encode(), value, ()))
        unique[message_id] = value
    return Stream(records, unique)


@pytest.mark.timeout(300)
def test_aborted_transactions_never_reach_the_lake_and_markers_never_stall_it(
    broker: Broker,
    names: Names,
    lake_jobs: list[LakeJob],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    topic = names.output_topic
    asyncio.run(create_topics(broker.bootstrap, [topic], 4))
    committed_a = segment_events("a", 200, seed=1)
    aborted_b = segment_events("b", 200, seed=2)
    committed_c = segment_events("c", 200, seed=3)
    aborted_d = segment_events("d", 100, seed=4)

    async def write(*steps: tuple[Stream, bool]) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            transactional_id=f"{names.app_id}-lake-test",
            enable_idempotence=True,
        )
        await producer.start()
        try:
            for stream, commit in steps:
                await transaction(producer, topic, stream, commit)
        finally:
            await producer.stop()

    # Every partition ends with a commit marker: the last offset holds no record.
    asyncio.run(write((committed_a, True)))
    job = LakeJob(broker, topic, tmp_path / "lake")
    lake_jobs.append(job)
    job.start()
    job.wait_caught_up(clean_ends(broker, topic), timeout=180)

    # Only aborted records and abort markers after what the job has read.
    asyncio.run(write((aborted_b, False)))
    ends = clean_ends(broker, topic)
    job.wait_caught_up(ends, timeout=60)

    # Committed, then aborted again: the partitions end with aborted records and abort markers.
    asyncio.run(write((committed_c, True), (aborted_d, False)))
    ends = clean_ends(broker, topic)
    job.wait_caught_up(ends, timeout=60)
    assert job.alive()

    everything = asyncio.run(
        read_topic(broker.bootstrap, topic, isolation_level="read_uncommitted")
    )
    written_ids = {r.key.decode() for r in everything if r.key is not None}
    assert set(aborted_b.unique) | set(aborted_d.unique) <= written_ids  # really in the log
    assert sum(ends.values()) > len(everything)  # and the log has offsets without a record

    table = read_table(spark, str(job.events_table))
    ids = [r.messageId for r in table.select("messageId").collect()]
    assert sorted(ids) == sorted({**committed_a.unique, **committed_c.unique})
    report = audit_events(spark, str(job.events_table))
    assert report.duplicates == 0
    assert job.stop() == 0
    assert "stopped; a restart continues from the checkpoints" in job.log_text()
