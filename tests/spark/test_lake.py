"""The audit and the lake's consistency checks, on a file-sink table written in-process."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark.audit import audit_counts, audit_events
from spark.lake import LakeStateError, TableMissingError, check_consistent, read_table
from spark.transforms import parse_events
from tests.spark.harness import sink_files, uncommitted_files
from tests.spark.test_transforms import KAFKA_SCHEMA
from tests.support import ROOT

pytestmark = pytest.mark.spark


def write_events_table(spark: SparkSession, lake: Path, ids: list[str]) -> None:
    """Run the events query of the job on a file source of Kafka rows (one per id, repeats
    allowed), into ``<lake>/events`` with its checkpoint, until the source is drained."""
    source = lake.parent / "kafka-rows"
    stamp = datetime(2026, 9, 21, 8, 0, tzinfo=UTC)
    rows = [
        (m.encode(), json.dumps({"messageId": m}).encode(), "t", 0, i, stamp, 0)
        for i, m in enumerate(ids)
    ]
    spark.createDataFrame(rows, KAFKA_SCHEMA).write.parquet(str(source))
    query = (
        parse_events(spark.readStream.schema(KAFKA_SCHEMA).parquet(str(source)))
        .writeStream.format("parquet")
        .partitionBy("event_date")
        .option("path", str(lake / "events"))
        .option("checkpointLocation", str(lake / "_checkpoints" / "events"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


def test_the_audit_counts_rows_ids_and_duplicates_through_the_sink_log(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    write_events_table(spark, lake, ["m-1", "m-2", "m-dup", "m-dup", "m-dup"])
    table = lake / "events"
    report = audit_events(spark, str(table))
    assert (report.rows, report.distinct, report.duplicates) == (5, 3, 2)
    assert report.duplicate_examples == [("m-dup", 3)]
    assert (report.dates, report.uncommitted_files) == (1, 0)
    assert report.committed_files == len(sink_files(table)) > 0

    # A killed attempt of a batch leaves files that no commit lists: readers ignore them.
    committed = next(table.glob("event_date=*/part-*.parquet"))
    shutil.copy(committed, committed.with_name("part-00000-killed-attempt.c000.snappy.parquet"))
    assert uncommitted_files(table) == {"part-00000-killed-attempt.c000.snappy.parquet"}
    again = audit_events(spark, str(table))
    assert (again.rows, again.distinct, again.uncommitted_files) == (5, 3, 1)
    assert spark.read.parquet(str(table)).count() == 5  # the reader every consumer uses
    assert audit_counts(spark, str(lake / "event_counts")) is None


def test_the_audit_command_exits_1_on_a_duplicate(spark: SparkSession, tmp_path: Path) -> None:
    lake = tmp_path / "lake"
    write_events_table(spark, lake, ["m-1", "m-dup", "m-dup"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DEDUPE_", "SPARK_"))}
    result = subprocess.run(
        [sys.executable, "-m", "spark.audit", "--lake", str(lake)],
        env={**env, "DEDUPE_SPARK_DRIVER_MEMORY": "512m"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("events: rows=3 distinct=2 duplicates=1 dates=1 files=")
    assert lines[1] == "  duplicate: 'm-dup' x2"
    assert lines[2] == "event_counts: no minute written yet"


def test_a_table_and_its_checkpoint_must_belong_together(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    table, checkpoint = str(lake / "events"), str(lake / "_checkpoints" / "events")
    check_consistent(spark, table, checkpoint)  # nothing yet: a first start
    with pytest.raises(TableMissingError):
        read_table(spark, table)
    write_events_table(spark, lake, ["m-1"])
    check_consistent(spark, table, checkpoint)  # as the job left them

    moved = tmp_path / "checkpoint-elsewhere"
    shutil.move(checkpoint, moved)
    with pytest.raises(LakeStateError, match=r"checkpoint .* is missing or empty"):
        check_consistent(spark, table, checkpoint)

    shutil.move(moved, checkpoint)
    shutil.rmtree(table)
    with pytest.raises(LakeStateError, match=r"the table .* is missing"):
        check_consistent(spark, table, checkpoint)
