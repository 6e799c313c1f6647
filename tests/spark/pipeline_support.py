"""Shared by the whole-pipeline tests (tests/spark/test_pipeline*.py, and
tests/cluster/test_other_clients.py): the clean topic's ends, the check that the lake holds
each event once, and a transaction of records sent to a topic, committed or aborted."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence

from aiokafka import AIOKafkaProducer
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from scripts.streams import Stream
from scripts.topic_reader import settled_ends
from spark.lake import read_table
from spark.transforms import COUNT_COLUMNS, count_per_minute
from tests.spark.harness import (
    LakeJob,
    read_without_spark,
)
from tests.support import Broker


def clean_ends(broker: Broker, topic: str, timeout: float = 30) -> dict[int, int]:
    """The read_committed end of each partition once the last transaction's markers are in the
    log (``settled_ends``: an aborted transaction's markers late by a moment left the end 100
    offsets short in a CI run)."""
    return asyncio.run(settled_ends(broker.bootstrap, topic, timeout))


def assert_lake_holds_exactly(
    spark: SparkSession,
    job: LakeJob,
    expected: Mapping[str, bytes],
    *,
    twice: Sequence[str] = (),
    counts: bool = True,
) -> int:
    """The events table (read through its log by Spark, and by delta-rs) holds each expected
    event once (those in ``twice``: twice), with its bytes, and nothing else; the counts table
    holds each minute once, with the events' count."""
    want = sorted([*expected, *twice])
    assert sorted(read_without_spark(job.events_table)) == want, "delta-rs reads otherwise"
    table = read_table(spark, str(job.events_table))
    rows = table.select("messageId", "value").collect()
    ids = [r.messageId for r in rows]
    assert set(ids) == set(expected), (
        f"missing {len(set(expected) - set(ids))}, unexpected {len(set(ids) - set(expected))}"
    )
    assert sorted(ids) == want, "a messageId is in the lake twice"
    assert all(r.value.encode() == expected[r.messageId] for r in rows)
    if not counts:
        return 0

    minutes = read_table(spark, str(job.counts_table)).select(*COUNT_COLUMNS)
    keys = ["window_start", "type", "event"]
    assert minutes.groupBy(*keys).count().where(F.col("count") > 1).count() == 0
    written = minutes.count()
    assert written > 0, "no minute of counts was written"
    # every minute written has the count of its events in the events table
    recomputed = count_per_minute(table, "1 hour").select(*COUNT_COLUMNS)
    assert minutes.exceptAll(recomputed).count() == 0
    return written


async def transaction(producer: AIOKafkaProducer, topic: str, stream: Stream, commit: bool) -> None:
    """One transaction holding ``stream``; every record is on the broker before it commits or
    aborts, so an aborted transaction leaves real aborted records in the log."""
    await producer.begin_transaction()
    sent = [await producer.send(topic, r.value, key=r.key) for r in stream.records]
    await asyncio.gather(*sent)
    if commit:
        await producer.commit_transaction()
    else:
        await producer.abort_transaction()
