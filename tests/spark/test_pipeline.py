"""The whole pipeline on real processes: events -> worker -> clean topic -> Spark job -> lake.

- events with duplicates reach the lake's Delta tables exactly once, and the per-minute counts
  once per minute; a late duplicate (an id back after the worker's window) is in the appended
  table twice and the audit names it, while a second job in merge-on-id mode keeps it out;
- the job killed with SIGKILL in the middle of micro-batches and restarted, then compacted by
  ``make lake-optimize``'s command while it runs: still exactly once, read by Spark and by
  delta-rs (no Spark);
- aborted transactions on the clean topic never reach the lake, and the offsets that hold no
  readable record (commit and abort markers, aborted records, also at the end of a partition)
  neither stall nor fail the job.

Each test has its own topics (``names``), lake and checkpoints (``tmp_path``).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from deltalake import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from scripts.streams import OutRecord, Stream, build_stream, make_event, produce
from scripts.topic_reader import end_offsets, read_topic
from spark.audit import audit_events
from spark.lake import read_table
from spark.transforms import COUNT_COLUMNS, count_per_minute
from tests.spark.harness import (
    LakeJob,
    batch_in_flight,
    committed_batches,
    read_without_spark,
    scrape,
    table_file_count,
    uncommitted_files,
)
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def clean_ends(broker: Broker, topic: str, timeout: float = 30) -> dict[int, int]:
    """The read_committed end of each partition once the last transaction's markers are in the
    log. A producer's commit or abort returns before the coordinator writes its markers, so
    just after one the read_committed end can still stop before that transaction (an aborted
    one: 100 offsets short in a CI run); with no transaction open it equals the log end."""
    deadline = time.monotonic() + timeout
    while True:
        committed = asyncio.run(end_offsets(broker.bootstrap, topic))
        log = asyncio.run(end_offsets(broker.bootstrap, topic, isolation_level="read_uncommitted"))
        if committed == log:
            return committed
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic}: a transaction still open after {timeout}s")
        time.sleep(0.1)


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

    # Appended: each event once, but the late copies twice, and the audit names them.
    status, output = run_audit(job)
    unique = len(stream.unique)
    assert status == 1, output
    assert f"events: rows={unique + 5} distinct={unique} duplicates=5 " in output, output
    for record in late:
        assert f"  duplicate: {record.message_id!r} x2" in output, output
    twice = [r.message_id for r in late]
    minutes = assert_lake_holds_exactly(spark, job, stream.unique, twice=twice)

    # The job's GET /metrics: every row it read, nothing left of the topic.
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

    # Merged on messageId: the same topic, each id once whatever its age. (Its counts table
    # counts every event read from the topic, the late copies too: not compared here.)
    assert_lake_holds_exactly(spark, merging, stream.unique, counts=False)
    assert job.stop() == 0, job.log_text()[-3000:]
    assert merging.stop() == 0, merging.log_text()[-3000:]
    print(
        f"\nevents={len(stream.records) + 5} unique={unique} late copies past the window=5: "
        f"appended lake rows={unique + 5} (audit: duplicates=5), merged lake rows={unique} "
        f"duplicates=0, count rows={minutes} (caught up {waited:.0f}s after the worker drained)"
    )


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


@pytest.mark.timeout(480)
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
        job.wait_batches(before + 1, timeout=120)  # running again: it committed a batch
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
    job.wait_batches(before + 1, timeout=120)
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


async def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()


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


@pytest.mark.timeout(300)
def test_aborted_transactions_never_reach_the_lake_and_markers_never_stall_it(
    broker: Broker,
    names: Names,
    lake_jobs: list[LakeJob],
    spark: SparkSession,
    tmp_path: Path,
) -> None:
    topic = names.output_topic
    asyncio.run(create_topic(broker.bootstrap, topic, 4))
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
