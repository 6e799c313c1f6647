"""The whole pipeline on real processes (events -> worker -> clean topic -> Spark job -> lake):
the job killed with SIGKILL in the middle of micro-batches and restarted, then compacted by
``make lake-optimize``'s command while it runs: still exactly once, read by Spark and by
delta-rs (no Spark).

Each test has its own topics (``names``), lake and checkpoints (``tmp_path``).
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from deltalake import DeltaTable
from pyspark.sql import SparkSession

from scripts.streams import OutRecord, build_stream, produce
from spark.audit import audit_events
from tests.spark.harness import (
    LakeJob,
    batch_in_flight,
    committed_batches,
    read_without_spark,
    table_file_count,
    uncommitted_files,
)
from tests.spark.pipeline_support import assert_lake_holds_exactly, clean_ends
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def optimize_while_feeding(
    job: LakeJob, broker: Broker, names: Names, records: list[OutRecord]
) -> tuple[int, str]:
    """Run ``python -m spark.upkeep optimize`` (``make lake-optimize``) on the job's lake while
    ``records`` go to the worker, 100 about every second; the last 300 are sent after it
    finished, so the job commits batches both during and after the compaction."""
    env = {k: v for k, v in job.env().items() if not k.startswith("DEDUPE_SPARK_")}
    optimize = subprocess.Popen(
        [sys.executable, "-m", "spark.upkeep", "optimize"],
        env={**env, "DEDUPE_SPARK_DRIVER_MEMORY": "512m"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    during, after = records[:-300], records[-300:]
    while optimize.poll() is None and during:
        asyncio.run(produce(broker.bootstrap, names.input_topic, during[:100]))
        during = during[100:]
        time.sleep(1)
    output, _ = optimize.communicate(timeout=180)
    asyncio.run(produce(broker.bootstrap, names.input_topic, during + after))
    return optimize.returncode, output


def appends_after(table: Path) -> int:
    """Commits of the job after the table's (last) OPTIMIZE, from the Delta history."""
    history = sorted(DeltaTable(str(table)).history(), key=lambda h: int(h["version"]))
    optimized = max(int(h["version"]) for h in history if h["operation"] == "OPTIMIZE")
    return sum(1 for h in history if int(h["version"]) > optimized and h["operation"] != "OPTIMIZE")


def kill_mid_batch(job: LakeJob, known_orphans: set[str], timeout: float = 60) -> bool:
    """SIGKILL the job while the events query has written files of a batch it has not
    committed; returns False when that moment was not seen in time and the job was killed while
    a batch was merely planned (offsets logged, not committed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if uncommitted_files(job.events_table) - known_orphans:
            job.kill()
            return True
        if not job.alive():
            raise AssertionError(f"the job exited:\n{job.log_text()[-6000:]}")
        time.sleep(0.005)
    while not batch_in_flight(job.events_checkpoint):
        time.sleep(0.005)
    job.kill()
    return False


#: From a job's start to its first committed batch: about 30 s alone on two cores, several times
#: that in make test's three lanes (four JVMs or more on the two cores). A job stuck past it prints
#: the step it is on (spark.job.StallWatch), which the failure shows.
START_TO_BATCH = 240


@pytest.mark.timeout(900)
def test_a_job_killed_mid_batch_and_restarted_still_writes_each_event_once(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    lake_jobs: list[LakeJob],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    worker = Worker(broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    # Small batches back to back, so the job is almost always inside one.
    job = LakeJob(
        broker,
        names.output_topic,
        tmp_path / "lake",
        extra_env={
            "DEDUPE_SPARK_MAX_OFFSETS_PER_TRIGGER": "2000",
            "DEDUPE_SPARK_TRIGGER_INTERVAL": "0",
        },
    )
    lake_jobs.append(job)

    stream = build_stream(12_000, 0.1, seed=52)
    half, three_quarters = len(stream.records) // 2, len(stream.records) * 3 // 4
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[:half]))
    # The next quarter arrives while the job is being killed and restarted, the last one while
    # its tables are compacted.
    rest = threading.Thread(
        target=lambda: asyncio.run(
            produce(broker.bootstrap, names.input_topic, stream.records[half:three_quarters])
        )
    )

    kills, mid_write, in_flight = 3, 0, 0
    orphans: set[str] = set()
    for k in range(kills):
        before = committed_batches(job.events_checkpoint)
        job.start()
        job.wait_batches(before + 1, timeout=START_TO_BATCH)  # running again: it committed a batch
        if k == 1:
            rest.start()
        time.sleep(random.Random(k).uniform(0, 1.5))
        mid_write += kill_mid_batch(job, orphans)
        in_flight += batch_in_flight(job.events_checkpoint)
        orphans = uncommitted_files(job.events_table)
    rest.join()
    left_behind = len(orphans)
    before = committed_batches(job.events_checkpoint)
    job.start()
    job.wait_batches(before + 1, timeout=START_TO_BATCH)
    # Compaction while the job runs and commits (the worker is still feeding the clean topic).
    files_before = table_file_count(job.events_table)
    status, optimized = optimize_while_feeding(job, broker, names, stream.records[three_quarters:])
    assert status == 0, optimized
    assert "lake-optimize: events: " in optimized, optimized
    assert job.alive(), job.log_text()[-3000:]
    wait_drained(broker, names, 180, workers)
    # Everything is in the clean topic now: stop the worker (gracefully, as an operator would),
    # then the job once it caught up, so neither competes with the audit for the two cores
    # (the job idles in a busy loop at a 0 s trigger).
    assert worker.kill(signal.SIGTERM) == 0, worker.log_text()[-3000:]
    job.wait_caught_up(clean_ends(broker, names.output_topic), timeout=300)
    assert job.stop() == 0, job.log_text()[-3000:]

    report = audit_events(spark, str(job.events_table))
    unique = len(stream.unique)
    without_spark = read_without_spark(job.events_table)
    print(
        f"\nevents={len(stream.records)} unique={unique} kills={kills} "
        f"(mid-batch {in_flight}, while writing files {mid_write}; files of killed attempts "
        f"{left_behind}) lake rows={report.rows} distinct={report.distinct} "
        f"duplicates={report.duplicates}; delta-rs rows={len(without_spark)} "
        f"distinct={len(set(without_spark))}; optimize while running: events had "
        f"{files_before} files -> {optimized.split('lake-optimize: events: ')[1].split()[3]} "
        f"at its commit, {table_file_count(job.events_table)} at the end "
        f"({appends_after(job.events_table)} appends committed after it)"
    )
    assert appends_after(job.events_table) >= 1, "the job committed nothing after the optimize"
    assert (report.rows, report.distinct, report.duplicates) == (unique, unique, 0)
    assert in_flight == kills, "every kill must interrupt a planned, uncommitted batch"
    assert left_behind >= 1, "no kill caught a batch with files written"
    assert_lake_holds_exactly(spark, job, stream.unique)
