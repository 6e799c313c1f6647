"""Spark's Kafka source on the secured broker: as User:dedupe-spark (Read on the clean topic and
Spark's groups only) the job's own reader (spark.job.read_clean_topic, read_committed, the
options of envsettings.kafka_security) sees the committed records and not the aborted ones; as
another component's user the query fails with Kafka's authorization error. One small local
session (Spark's start-up is most of this test's time)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession

from spark.jars import resolve
from spark.job import read_clean_topic
from spark.session import build_session
from spark.settings import SparkSettings
from tests.security.conftest import SecureBroker
from tests.support import Names


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    settings = SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="1g")
    resolve(settings.jars_dir)
    session = build_session(settings, "dedupe-security-tests")
    yield session
    session.stop()


async def fill_clean_topic(secure: SecureBroker, topic: str) -> None:
    """20 committed records and 5 aborted ones, written transactionally as the super user."""
    admin_client = secure.client("admin")
    admin = AIOKafkaAdminClient(bootstrap_servers=secure.broker.bootstrap, **admin_client)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(
        bootstrap_servers=secure.broker.bootstrap,
        transactional_id=f"{topic}-filler",
        **admin_client,
    )
    await producer.start()
    try:
        for n, commit in ((20, True), (5, False)):
            await producer.begin_transaction()
            for i in range(n):
                await producer.send(topic, b"{}", key=f"{'c' if commit else 'a'}-{i}".encode())
            await (producer.commit_transaction() if commit else producer.abort_transaction())
    finally:
        await producer.stop()


def read_as(spark: SparkSession, secure: SecureBroker, user: str, topic: str, where: Path) -> int:
    """Rows the job's reader gets from ``topic`` as ``user`` (one availableNow run)."""
    settings = SparkSettings.from_env({**secure.env_of(user), "DEDUPE_OUTPUT_TOPIC": topic})
    query = (
        read_clean_topic(spark, settings)
        .writeStream.format("parquet")
        .option("path", str(where / "rows"))
        .option("checkpointLocation", str(where / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    return spark.read.parquet(str(where / "rows")).count()


def test_spark_reads_the_clean_topic_as_its_own_principal_only(
    spark: SparkSession, secure: SecureBroker, names: Names, tmp_path: Path
) -> None:
    secure.grant(names)
    asyncio.run(fill_clean_topic(secure, names.output_topic))
    assert read_as(spark, secure, "dedupe-spark", names.output_topic, tmp_path / "own") == 20
    with pytest.raises(StreamingQueryException) as refused:
        read_as(spark, secure, "dedupe-ingest", names.output_topic, tmp_path / "other")
    message = str(refused.value)
    print(f"\nSpark as dedupe-ingest: {message[:600]}")
    assert "TopicAuthorizationException" in message
    assert secure.password_of("dedupe-spark") not in message
