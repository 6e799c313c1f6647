"""The lake's tables written in-process: the audit, the table/checkpoint guard, compaction and
vacuum, merge-on-id, and the log store that gives each Delta version to one writer."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from py4j.protocol import Py4JJavaError
from pyspark.sql import SparkSession

from spark.audit import audit_counts, audit_events
from spark.lake import (
    LakeStateError,
    TableMissingError,
    check_consistent,
    is_concurrent_conflict,
    read_table,
)
from spark.merge import MergeOnId
from spark.settings import DELTA, PARQUET
from spark.transforms import parse_events
from spark.upkeep import VacuumResult, optimize_table, vacuum_table
from tests.spark.harness import (
    read_without_spark,
    sink_files,
    table_file_count,
    uncommitted_files,
)
from tests.spark.test_transforms import KAFKA_SCHEMA
from tests.support import ROOT

pytestmark = pytest.mark.spark

STAMP = datetime(2026, 9, 21, 8, 0, tzinfo=UTC)


def kafka_rows(spark: SparkSession, ids: list[str], first_offset: int = 0) -> Any:
    """Kafka source rows, one per id (repeats allowed), each with a userId."""
    rows = [
        (
            m.encode(),
            json.dumps({"messageId": m, "userId": f"u-{i % 7}"}).encode(),
            "t",
            0,
            first_offset + i,
            STAMP,
            0,
        )
        for i, m in enumerate(ids)
    ]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def write_events_table(
    spark: SparkSession,
    lake: Path,
    ids: list[str],
    *,
    lake_format: str = DELTA,
    batches: int = 1,
) -> None:
    """Run the events query of the job on a file source of Kafka rows (one per id, repeats
    allowed) in ``batches`` micro-batches, into ``<lake>/events`` with its checkpoint."""
    source = lake.parent / "kafka-rows"
    kafka_rows(spark, ids).repartition(batches).write.parquet(str(source))
    query = (
        parse_events(
            spark.readStream.schema(KAFKA_SCHEMA)
            .option("maxFilesPerTrigger", 1)
            .parquet(str(source))
        )
        .writeStream.format(lake_format)
        .partitionBy("event_date")
        .option("path", str(lake / "events"))
        .option("checkpointLocation", str(lake / "_checkpoints" / "events"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)


@pytest.mark.parametrize("lake_format", [DELTA, PARQUET])
def test_the_audit_counts_rows_ids_and_duplicates_through_the_tables_log(
    spark: SparkSession, tmp_path: Path, lake_format: str
) -> None:
    lake = tmp_path / "lake"
    write_events_table(
        spark, lake, ["m-1", "m-2", "m-dup", "m-dup", "m-dup"], lake_format=lake_format
    )
    table = lake / "events"
    report = audit_events(spark, str(table), lake_format)
    assert (report.rows, report.distinct, report.duplicates) == (5, 3, 2)
    assert report.duplicate_examples == [("m-dup", 3)]
    assert (report.dates, report.uncommitted_files) == (1, 0)
    assert report.committed_files == len(sink_files(table)) > 0
    assert report.version == (0 if lake_format == DELTA else None)

    # A killed attempt of a batch leaves files that no commit lists: readers ignore them.
    committed = next(table.glob("event_date=*/part-*.parquet"))
    shutil.copy(committed, committed.with_name("part-00000-killed-attempt.c000.snappy.parquet"))
    assert uncommitted_files(table) == {"part-00000-killed-attempt.c000.snappy.parquet"}
    again = audit_events(spark, str(table), lake_format)
    assert (again.rows, again.distinct, again.uncommitted_files) == (5, 3, 1)
    assert read_table(spark, str(table), lake_format).count() == 5  # Spark's readers
    if lake_format == DELTA:  # and any other engine's, through the Delta log
        assert sorted(read_without_spark(table)) == ["m-1", "m-2", "m-dup", "m-dup", "m-dup"]
    assert audit_counts(spark, str(lake / "event_counts"), lake_format) is None


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
    assert lines[0].endswith("(delta version 0)")
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
    with pytest.raises(LakeStateError, match=r"is a delta table .* DEDUPE_LAKE_FORMAT is parquet"):
        check_consistent(spark, table, checkpoint, PARQUET)

    moved = tmp_path / "checkpoint-elsewhere"
    shutil.move(checkpoint, moved)
    with pytest.raises(LakeStateError, match=r"checkpoint .* is missing or empty"):
        check_consistent(spark, table, checkpoint)

    shutil.move(moved, checkpoint)
    shutil.rmtree(table)
    with pytest.raises(LakeStateError, match=r"the table .* is missing"):
        check_consistent(spark, table, checkpoint)


def test_optimize_compacts_and_vacuum_deletes_only_unused_old_files(
    spark: SparkSession, tmp_path: Path
) -> None:
    lake = tmp_path / "lake"
    ids = [f"m-{i}" for i in range(400)]
    write_events_table(spark, lake, ids, batches=4)
    table = lake / "events"
    small = table_file_count(table)
    assert small >= 4  # at least one file per micro-batch

    result = optimize_table(spark, str(table), ["userId"])
    assert (result.files_before, result.files_after) == (small, 1)  # one date: one file
    assert result.version_after == result.version_before + 1
    assert table_file_count(table) == 1
    assert sorted(read_without_spark(table)) == sorted(ids)  # each id once, without Spark
    report = audit_events(spark, str(table))
    assert (report.rows, report.distinct, report.uncommitted_files) == (400, 400, small)

    # The replaced files are kept for readers of older versions until they are old enough.
    kept = vacuum_table(spark, str(table), 3600)
    assert isinstance(kept, VacuumResult) and kept.on_disk_after == kept.on_disk_before == small + 1
    listed = vacuum_table(spark, str(table), 0, dry_run=True)
    assert isinstance(listed, list) and len(listed) == small
    gone = vacuum_table(spark, str(table), 0)  # no job writes this table: 0 is safe here
    assert isinstance(gone, VacuumResult) and gone.on_disk_after == 1
    assert sorted(read_without_spark(table)) == sorted(ids)
    assert audit_events(spark, str(table)).uncommitted_files == 0


def test_merge_on_id_inserts_only_new_ids_and_a_rerun_batch_inserts_nothing(
    spark: SparkSession, tmp_path: Path
) -> None:
    table = tmp_path / "lake" / "events"
    merge = MergeOnId(str(table))
    merge(parse_events(kafka_rows(spark, ["m-1", "m-2"])), 0)  # creates the table
    late = parse_events(kafka_rows(spark, ["m-2", "m-3", "m-3"], first_offset=2))
    merge(late, 1)  # a late duplicate of m-2, and m-3 twice in one batch
    assert sorted(read_without_spark(table)) == ["m-1", "m-2", "m-3"]
    merge(late, 1)  # batch 1 again, as after a kill -9 between the MERGE and the checkpoint
    merge(parse_events(kafka_rows(spark, ["m-1", "m-2"])), 0)  # and batch 0 again
    assert sorted(read_without_spark(table)) == ["m-1", "m-2", "m-3"]
    kept = read_table(spark, str(table)).where("messageId = 'm-2'").select("kafka_offset")
    assert [r.kafka_offset for r in kept.collect()] == [1]  # the first copy stays


def test_delta_conflicts_are_told_apart_from_other_errors(spark: SparkSession) -> None:
    jvm: Any = spark.sparkContext._jvm
    lost = Py4JJavaError("merge", jvm.io.delta.exceptions.ConcurrentAppendException("lost"))
    wrapped = Py4JJavaError("job", jvm.java.lang.RuntimeException("wrapped", lost.java_exception))
    other = Py4JJavaError("job", jvm.java.lang.IllegalStateException("broken"))
    assert is_concurrent_conflict(lost) and is_concurrent_conflict(wrapped)
    assert not is_concurrent_conflict(other)
    assert not is_concurrent_conflict(ValueError("DELTA_CONCURRENT_APPEND"))


@pytest.mark.timeout(300)
def test_merges_racing_a_compaction_are_run_again_and_insert_each_id_once(
    spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """MERGE reads the table; a compaction committed meanwhile makes it fail with a conflict
    (a plain Py4JJavaError from Delta's Python API), and MergeOnId runs it again."""
    table = str(tmp_path / "events")
    merge = MergeOnId(table)
    batches = [[f"m-{b}-{i}" for i in range(20)] for b in range(8)]
    for b in range(2):
        merge(parse_events(kafka_rows(spark, batches[b], first_offset=b * 20)), b)
    done = threading.Event()
    compactions: list[int] = []

    def compact() -> None:
        while not done.is_set():
            compactions.append(optimize_table(spark, table).files_after)
            done.wait(0.5)

    compactor = threading.Thread(target=compact)
    compactor.start()
    try:
        for b in range(2, len(batches)):
            merge(parse_events(kafka_rows(spark, batches[b], first_offset=b * 20)), b)
    finally:
        done.set()
        compactor.join(120)
    ids = read_without_spark(Path(table))
    assert sorted(ids) == sorted(i for batch in batches for i in batch)
    races = capsys.readouterr().err.count("MERGE lost a race")
    print(f"\n{len(compactions)} compactions during 6 merges; {races} merges run again")
    assert compactions


def test_the_log_store_gives_each_version_to_one_writer(
    spark: SparkSession, tmp_path: Path
) -> None:
    jvm: Any = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    store = jvm.dedupe.delta.LinkLogStore(conf)
    path = jvm.org.apache.hadoop.fs.Path(f"file:{tmp_path}/00000000000000000007.json")

    def write(line: str, overwrite: bool = False) -> None:
        actions = jvm.java.util.ArrayList()
        actions.add(line)
        store.write(path, actions.iterator(), overwrite, conf)

    write('{"commitInfo":{"by":"first"}}')
    with pytest.raises(Exception, match="FileAlreadyExistsException"):
        write('{"commitInfo":{"by":"second"}}')
    assert (tmp_path / "00000000000000000007.json").read_text() == '{"commitInfo":{"by":"first"}}\n'
    write('{"commitInfo":{"by":"overwrite"}}', overwrite=True)  # _last_checkpoint is rewritten
    assert "overwrite" in (tmp_path / "00000000000000000007.json").read_text()
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000007.json"]  # no temp left
