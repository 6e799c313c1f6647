"""The whole pipeline on real processes: events -> worker -> clean topic -> Spark job -> lake.

Events with duplicates reach the lake's Delta tables exactly once, and the per-minute counts
once per minute; a late duplicate (an id back after the worker's window) is in the appended
table twice and the audit names it, while a second job in merge-on-id mode keeps it out.

Each test has its own topics (``names``), lake and checkpoints (``tmp_path``).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from deltalake.exceptions import TableNotFoundError
from pyspark.sql import SparkSession

from scripts.streams import OutRecord, build_stream, produce
from tests.spark.harness import LakeJob, scrape, table_file_count
from tests.spark.pipeline_support import assert_lake_holds_exactly, clean_ends
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def run_module(job: LakeJob, *args: str) -> tuple[int, str]:
    """``python -m <args>`` on the job's lake, as an operator runs it (``make audit``,
    ``make lake-optimize``...)."""
    env = {k: v for k, v in job.env().items() if not k.startswith("DEDUPE_SPARK_")}
    result = subprocess.run(
        [sys.executable, "-m", *args],
        env={**env, "DEDUPE_SPARK_DRIVER_MEMORY": "512m"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    return result.returncode, result.stdout + result.stderr


def run_audit(job: LakeJob) -> tuple[int, str]:
    return run_module(job, "spark.audit")


def counts_written(job: LakeJob) -> bool:
    """The job's counts table has a file of minutes in its current version (delta-rs)."""
    try:
        return table_file_count(job.counts_table) > 0
    except TableNotFoundError:
        return False


async def send_at(bootstrap: str, topic: str, records: list[OutRecord], at_ms: int) -> None:
    """Send ``records`` with the record time ``at_ms`` (the worker's clock: Kafka timestamps)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=True)
    await producer.start()
    try:
        sent = [await producer.send(topic, r.value, key=r.key, timestamp_ms=at_ms) for r in records]
        await asyncio.gather(*sent)
    finally:
        await producer.stop()


@pytest.mark.timeout(480)
def test_events_with_duplicates_reach_the_lake_once_and_late_ones_show_in_the_audit(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    lake_jobs: list[LakeJob],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    worker = Worker(broker, names, extra_env={"DEDUPE_WINDOW": "1h"})
    workers.append(worker)
    worker.start()
    worker.wait_ready()  # the clean topic exists from here on
    job = LakeJob(broker, names.output_topic, tmp_path / "lake")
    merging = LakeJob(
        broker, names.output_topic, tmp_path / "lake-merge", {"DEDUPE_LAKE_WRITE": "merge"}
    )
    lake_jobs.extend([job, merging])
    job.start()
    merging.start()

    stream = build_stream(20_000, 0.1, seed=51)
    # Five of its ids were already sent two hours earlier (record time): past the worker's 1h
    # window, so the stream's copies of them pass as new. (The broker refuses record times far
    # in the future, so the first copies are the ones moved back in time.)
    firsts: dict[str, OutRecord] = {}
    for record in stream.records:
        firsts.setdefault(record.message_id, record)
    late = list(firsts.values())[:5]
    earlier_ms = int(time.time() * 1000) - 2 * 3600 * 1000
    asyncio.run(send_at(broker.bootstrap, names.input_topic, late, earlier_ms))
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, 180, workers)
    ends = clean_ends(broker, names.output_topic)
    waited = job.wait_caught_up(ends, timeout=240)
    merging.wait_caught_up(ends, timeout=240)

    # The job's GET /metrics while it runs: every row it read, nothing left of the topic.
    unique = len(stream.unique)

    def rows(query: str) -> float:
        return scrape(job.metrics_port).get(("dedupe_lake_rows_total", (("query", query),)), 0)

    deadline = time.monotonic() + 30  # the job reads each query's progress twice a second
    while min(rows("events"), rows("event_counts")) < unique + 5 and time.monotonic() < deadline:
        time.sleep(0.5)
    samples = scrape(job.metrics_port)
    for query in ("events", "event_counts"):
        labels = (("query", query),)
        assert samples[("dedupe_lake_rows_total", labels)] == unique + 5, (query, samples)
        assert samples[("dedupe_lake_offsets_behind", labels)] == 0, (query, samples)
        assert samples[("dedupe_lake_batches_total", labels)] >= 1, (query, samples)

    # The minutes behind the watermark (the late copies' two hours back) are written by the
    # batch after the one that read them, a batch without data: wait for it before the stop.
    deadline = time.monotonic() + 120
    while not counts_written(job) and time.monotonic() < deadline:
        assert job.alive(), job.log_text()[-3000:]
        time.sleep(0.5)

    # Everything is in the lake: stop both jobs (each polls the broker twice a second at its
    # trigger) and the worker, so the audit's JVM does not share the two cores with three more
    # processes. A CI run of make test had the audit past its 180 s with them still running.
    assert job.stop() == 0, job.log_text()[-3000:]
    assert merging.stop() == 0, merging.log_text()[-3000:]
    assert worker.kill(signal.SIGTERM) == 0, worker.log_text()[-3000:]

    # Appended: each event once, but the late copies twice, and the audit names them.
    status, output = run_audit(job)
    assert status == 1, output
    assert f"events: rows={unique + 5} distinct={unique} duplicates=5 " in output, output
    for record in late:
        assert f"  duplicate: {record.message_id!r} x2" in output, output
    twice = [r.message_id for r in late]
    minutes = assert_lake_holds_exactly(spark, job, stream.unique, twice=twice)

    # Merged on messageId: the same topic, each id once whatever its age. (Its counts table
    # counts every event read from the topic, the late copies too: not compared here.)
    assert_lake_holds_exactly(spark, merging, stream.unique, counts=False)
    print(
        f"\nevents={len(stream.records) + 5} unique={unique} late copies past the window=5: "
        f"appended lake rows={unique + 5} (audit: duplicates=5), merged lake rows={unique} "
        f"duplicates=0, count rows={minutes} (caught up {waited:.0f}s after the worker drained)"
    )
