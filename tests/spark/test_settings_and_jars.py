"""Settings of the Spark jobs (validation, locations, README) and the connector jar cache."""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from spark.jars import (
    CONNECTOR,
    DELTA,
    MANIFEST,
    cache_dir,
    cached_jars,
    delta_version,
    log_store_jar_name,
    pyspark_jar_names,
)
from spark.jars import shipped_by_pyspark as shipped
from spark.settings import APPEND, MERGE, SparkSettings, SparkSettingsError
from spark.settings_table import markdown_table

pytestmark = pytest.mark.spark

SPARK_DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"


def test_defaults_read_the_workers_clean_topic_into_a_local_lake() -> None:
    s = SparkSettings.from_env({})
    assert (s.bootstrap_servers, s.topic, s.master) == (
        "localhost:9092",
        "events-clean",
        "local[2]",
    )
    assert s.events_path == str(Path("lake").resolve() / "events")
    assert s.counts_path == str(Path("lake").resolve() / "event_counts")
    assert s.events_checkpoint == str(Path("lake").resolve() / "_checkpoints" / "events")
    assert (s.trigger, s.watermark_delay) == ("10000 milliseconds", "600000 milliseconds")
    assert (s.lake_format, s.lake_write, s.zorder_columns) == ("delta", APPEND, [])
    assert s.vacuum_retention == 7 * 86400


def test_every_setting_comes_from_its_environment_variable(tmp_path: Path) -> None:
    s = SparkSettings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": "k1:9092,k2:9093",
            "DEDUPE_OUTPUT_TOPIC": "clean",
            "DEDUPE_LAKE_DIR": "s3a://bucket/lake/",
            "DEDUPE_SPARK_CHECKPOINT_DIR": str(tmp_path / "cp"),
            "DEDUPE_SPARK_MASTER": "spark://master:7077",
            "DEDUPE_SPARK_TRIGGER_INTERVAL": "250ms",
            "DEDUPE_SPARK_MAX_OFFSETS_PER_TRIGGER": "0",
            "DEDUPE_SPARK_STARTING_OFFSETS": "latest",
            "DEDUPE_SPARK_WATERMARK": "2h",
            "DEDUPE_SPARK_SHUFFLE_PARTITIONS": "64",
            "DEDUPE_SPARK_DRIVER_MEMORY": "4g",
            "DEDUPE_SPARK_JARS_DIR": str(tmp_path / "jars"),
            "DEDUPE_SPARK_LOG_LEVEL": "info",
            "DEDUPE_LAKE_WRITE": "merge",
            "DEDUPE_LAKE_ZORDER_BY": "userId, event_time",
            "DEDUPE_LAKE_VACUUM_RETENTION": "36h",
        }
    )
    assert (s.lake_format, s.lake_write, s.zorder_columns) == (
        "delta",
        MERGE,
        ["userId", "event_time"],
    )
    assert s.vacuum_retention == 36 * 3600
    assert s.events_path == "s3a://bucket/lake/events"
    assert s.counts_checkpoint == f"{tmp_path}/cp/event_counts"
    assert (s.trigger, s.watermark_delay) == ("250 milliseconds", "7200000 milliseconds")
    assert (s.max_offsets_per_trigger, s.starting_offsets, s.shuffle_partitions) == (
        0,
        "latest",
        64,
    )
    assert s.jars_dir == tmp_path / "jars"


@pytest.mark.parametrize(
    ("env", "value", "message"),
    [
        ("KAFKA_BOOTSTRAP_SERVERS", "localhost", "host:port"),
        ("DEDUPE_OUTPUT_TOPIC", "bad topic", "[A-Za-z0-9._-]"),
        ("DEDUPE_SPARK_MASTER", "local[two]", "local[N]"),
        ("DEDUPE_SPARK_TRIGGER_INTERVAL", "2h", "0..1h"),
        ("DEDUPE_SPARK_TRIGGER_INTERVAL", "soon", "not a duration"),
        ("DEDUPE_SPARK_MAX_OFFSETS_PER_TRIGGER", "-1", "0 (no limit)"),
        ("DEDUPE_SPARK_MAX_OFFSETS_PER_TRIGGER", "many", "invalid literal"),
        ("DEDUPE_SPARK_STARTING_OFFSETS", "beginning", "earliest|latest"),
        ("DEDUPE_SPARK_WATERMARK", "0s", "1s..7d"),
        ("DEDUPE_SPARK_SHUFFLE_PARTITIONS", "0", "1..10000"),
        ("DEDUPE_SPARK_DRIVER_MEMORY", "lots", "512m"),
        ("DEDUPE_SPARK_LOG_LEVEL", "loud", "error|warn|info|debug"),
        ("DEDUPE_LAKE_FORMAT", "iceberg", "delta|parquet"),
        ("DEDUPE_LAKE_WRITE", "upsert", "append|merge"),
        ("DEDUPE_LAKE_ZORDER_BY", "userId,colour", "'colour' is not a column"),
        ("DEDUPE_LAKE_ZORDER_BY", "event_date", "partition column"),
        ("DEDUPE_LAKE_VACUUM_RETENTION", "10m", "must be 1h..10y"),
    ],
)
def test_an_invalid_value_is_refused_naming_the_variable(
    env: str, value: str, message: str
) -> None:
    with pytest.raises(SparkSettingsError) as caught:
        SparkSettings.from_env({env: value})
    assert env in str(caught.value) and message in str(caught.value)


def test_merge_needs_delta() -> None:
    with pytest.raises(
        SparkSettingsError, match="DEDUPE_LAKE_WRITE=merge needs DEDUPE_LAKE_FORMAT"
    ):
        SparkSettings.from_env({"DEDUPE_LAKE_WRITE": "merge", "DEDUPE_LAKE_FORMAT": "parquet"})


def test_the_spark_doc_lists_every_spark_setting_as_the_settings_object_documents_it() -> None:
    assert markdown_table() in SPARK_DOC.read_text(), "run: python -m spark.settings_table"


def test_a_jar_counts_as_shipped_only_for_the_same_artifact() -> None:
    names = ["scala-library-2.13.16.jar", "commons-pool-1.5.4.jar", "spark-tags_2.13-4.0.0.jar"]
    assert shipped("scala-library", names) == "scala-library-2.13.16.jar"
    assert shipped("spark-tags_2.13", names) == "spark-tags_2.13-4.0.0.jar"
    assert shipped("commons-pool2", names) is None  # commons-pool (1.x) is another artifact
    assert shipped("scala", names) is None


def test_the_cache_holds_the_connector_and_delta_of_this_pyspark_and_nothing_pyspark_ships(
    spark_jars: list[Path],
) -> None:
    version = pyspark.__version__
    assert spark_jars == cached_jars(SparkSettings().jars_dir)
    names = {j.name for j in spark_jars}
    assert f"{CONNECTOR}-{version}.jar" in names
    assert f"spark-token-provider-kafka-0-10_2.13-{version}.jar" in names
    assert any(n.startswith("kafka-clients-") for n in names)
    assert any(n.startswith("commons-pool2-") for n in names)
    assert delta_version() == "4.0.0"  # delta-spark 4.0.x is built for Spark 4.0
    assert f"{DELTA}-{delta_version()}.jar" in names
    assert f"delta-storage-{delta_version()}.jar" in names
    assert log_store_jar_name() in names  # compiled from scripts/spark/LinkLogStore.java
    shipped_jars = set(pyspark_jar_names())
    assert not names & shipped_jars
    manifest = (cache_dir(SparkSettings().jars_dir) / MANIFEST).read_text()
    assert "dropped org.scala-lang:scala-library" in manifest  # the closure was filtered
    assert "dropped org.antlr:antlr4-runtime" in manifest  # Delta's parser runtime: pyspark's
    for line in manifest.splitlines():
        if line.startswith("kept"):
            artifact = line.split()[1].split(":")[1]
            assert shipped(artifact, sorted(shipped_jars)) is None, line
