"""Every client of the pipeline at once on the three-broker cluster, through a kill -9 of the
broker leading most partitions of the input and clean topics: Segment-style clients post
batches to the real HTTP ingest service (retrying 503s and resending some answered batches),
two dedup workers, the Spark job writing the clean topic into a Delta lake, and the
idempotent-consumer library's Kafka glue charging an effect per event into PostgreSQL. Each is
given the whole bootstrap list; the workers create every topic, with replication 3.

Afterwards: the clean topic holds every id exactly once (the full verification), so does the
lake (``spark.audit``, and delta-rs reading the table's log), the consumer ran each effect
exactly once, and no broker holds a hanging transaction (``kafka-transactions find-hanging``).

How to run: part of ``make test-cluster``. Ports: the ingest service listens on the cluster's
port + 40 and the test's PostgreSQL (scripts/servers.sh, stopped at the end) on port + 41;
the Spark UI is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from aiokafka.admin import AIOKafkaAdminClient

from scripts.kafka_cluster import Cluster
from scripts.topic_reader import read_topic
from tests.cluster.clients import ConsumerThread, HttpFeed
from tests.cluster.conftest import CLUSTER_PORT
from tests.cluster.support import assert_protocol, hanging, leaders, protocol_of, two_workers
from tests.faults.scenario import drain_and_verify, record
from tests.ingest.cases import sdk_event
from tests.ingest.support import IngestProcess, records_in
from tests.reliability import Reliability
from tests.spark.harness import LakeJob, read_without_spark
from tests.spark.pipeline_support import clean_ends
from tests.support import ROOT, Broker, Names
from tests.workers import Worker

pytestmark = [pytest.mark.faults, pytest.mark.spark]

INGEST_PORT = CLUSTER_PORT + 40
PG_PORT = CLUSTER_PORT + 41
SERVERS = ROOT / "scripts" / "servers.sh"
EVENTS = 6_000
BATCH = 20
FEED_SECONDS = 30.0
#: Batches sent before the steady feed, to see the lake job and the consumer at work.
WARM_UP = 10


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A PostgreSQL of this module's own (scripts/servers.sh), stopped afterwards."""
    env = dict(os.environ, PG_PORT=str(PG_PORT))
    up = subprocess.run(
        [str(SERVERS), "up", "postgres"], env=env, capture_output=True, text=True, timeout=600
    )
    if up.returncode != 0:
        pytest.fail(f"cannot start PostgreSQL:\n{up.stdout}\n{up.stderr}")
    yield f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres"
    subprocess.run([str(SERVERS), "down", "postgres"], env=env, capture_output=True, timeout=120)


def batches(names: Names) -> tuple[list[bytes], list[str]]:
    """Segment SDK batches of ``EVENTS`` events with messageIds; returns (bodies, ids)."""
    now = datetime.now(UTC).isoformat()
    events = [
        sdk_event(n, messageId=f"{names.suffix}-{n:05d}", timestamp=now) for n in range(EVENTS)
    ]
    bodies = [
        json.dumps({"batch": events[i : i + BATCH]}).encode() for i in range(0, EVENTS, BATCH)
    ]
    return bodies, [e["messageId"] for e in events]


def replication(bootstrap: str, topics: list[str]) -> dict[str, set[int]]:
    """Per topic, the replica counts of its partitions."""

    async def ask() -> dict[str, set[int]]:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=10000)
        await admin.start()
        try:
            described = await admin.describe_topics(topics)
            return {t["topic"]: {len(p["replicas"]) for p in t["partitions"]} for t in described}
        finally:
            await admin.close()

    return asyncio.run(ask())


def audit_in_background(job: LakeJob) -> subprocess.Popen[str]:
    """``python -m spark.audit`` (``make audit``) on the job's lake, as an operator runs it."""
    env = {k: v for k, v in job.env().items() if not k.startswith("DEDUPE_SPARK_")}
    return subprocess.Popen(
        [sys.executable, "-m", "spark.audit"],
        env={**env, "DEDUPE_SPARK_DRIVER_MEMORY": "512m"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def once_each(found: list[str], expected: list[str]) -> tuple[int, int]:
    """(duplicates, missing) of ``found`` against the ids ``expected`` once each; fails when
    anything else is there."""
    counts = Counter(found)
    unexpected = set(counts) - set(expected)
    assert not unexpected, f"unexpected ids: {sorted(unexpected)[:5]}"
    return sum(n - 1 for n in counts.values()), len(set(expected) - set(counts))


@pytest.mark.timeout(600)
def test_ingest_spark_and_idempotent_consumer_through_a_leader_kill(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    postgres: str,
    tmp_path: Path,
) -> None:
    started = time.monotonic()
    laps: list[str] = []

    def lap(phase: str) -> None:
        laps.append(f"{phase} {time.monotonic() - started:.0f}s")

    table = f"idem_{names.suffix}"
    with psycopg.connect(postgres, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_effects (event_id text NOT NULL, kafka_offset text)")
    two_workers(broker, names, workers)  # they create the topics
    lap("workers")
    pipeline = [names.input_topic, names.output_topic, names.dlq_topic, names.changelog_topic]
    assert replication(broker.bootstrap, pipeline) == {t: {3} for t in pipeline}

    service = IngestProcess(broker, names.input_topic, tmp_path / "ingest.log", port=INGEST_PORT)
    job = LakeJob(broker, names.output_topic, tmp_path / "lake")
    consumer = ConsumerThread(
        names.output_topic, broker.bootstrap, f"billing-{names.suffix}", postgres, table
    )
    audit: subprocess.Popen[str] | None = None
    try:
        service.start()
        job.start()
        consumer.start()
        service.wait_ready(60)
        bodies, ids = batches(names)
        # A first few batches, then wait until the job has committed one to the lake and the
        # consumer has charged an effect (the job's JVM starts slowly on a loaded machine):
        # the kill must meet every client at work, while the clients are still posting.
        warm_up = HttpFeed(service.url, bodies[:WARM_UP], 0.0)
        warm_up.start()
        warm_up.join()
        job.wait_batches(1, timeout=180)
        consumer.wait_for(1, timeout=60)
        lap("job+consumer at work")
        feed = HttpFeed(service.url, bodies[WARM_UP:], FEED_SECONDS)
        feed.start()
        time.sleep(FEED_SECONDS / 4)
        assert feed.flowing(), "the feed ended before the kill"
        counts = leaders(broker.bootstrap, [names.input_topic, names.output_topic])
        victim = cluster.broker(counts.most_common(1)[0][0])
        victim.signal(signal.SIGKILL)
        killed_at = time.monotonic()
        time.sleep(6)
        victim.start()
        cluster.wait_healthy(240)
        lap("kill+healthy")
        feed.join()
        lap("feed")
        for f in (warm_up, feed):
            assert f.statuses[200] == len(f.bodies) + f.resent, f.statuses

        # The clean topic: every id once, every input record committed, no open transaction.
        report, waited = drain_and_verify(broker, names, workers)
        assert_protocol([w.log_text() for w in workers], protocol_of(cluster))
        lap("drain+verify")
        clean = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
        assert once_each([(r.key or b"").decode() for r in clean], ids) == (0, 0)

        # The lake: the job caught up with the clean topic, then stopped; audited (in the
        # background, while the effects are checked) and read by delta-rs.
        job.wait_caught_up(clean_ends(broker, names.output_topic), timeout=180)
        assert job.stop() == 0, job.log_text()[-3000:]
        lap("lake caught up")
        audit = audit_in_background(job)
        lake_ids = read_without_spark(job.events_table)
        lake_dup, lake_missing = once_each(lake_ids, ids)
        unique = len(ids)

        left_open = hanging(cluster)  # while the audit runs and the consumer catches up
        lap("find-hanging")

        # The effects: one per id, the same in PostgreSQL as in the consumer's counters.
        consumer.wait_for(unique, timeout=120)
        consumer.stop()
        with psycopg.connect(postgres) as conn:
            rows = conn.execute(f"SELECT event_id FROM {table}_effects").fetchall()
        effect_dup, effect_missing = once_each([r[0] for r in rows], ids)
        lap("effects")
        stats = consumer.stats
        assert service.stop() == 0, service.log_text()[-3000:]  # SIGTERM: a graceful exit
        audited, _ = audit.communicate(timeout=240)
        lap("audit")
    finally:
        service.stop()
        job.kill()
        if audit is not None and audit.poll() is None:
            audit.kill()
        if consumer.thread.is_alive():
            with contextlib.suppress(AssertionError):  # the test's own failure is the report
                consumer.stop()

    events_in = records_in(broker, names.input_topic)
    print(
        f"\nC8: {len(bodies)} HTTP batches ({unique} events) over {FEED_SECONDS:.0f}s, "
        f"{warm_up.resent + feed.resent} resent after a 200, "
        f"{warm_up.retries + feed.retries} attempts retried "
        f"({dict(warm_up.statuses + feed.statuses)}); input records {events_in}; "
        f"broker {victim.id} killed "
        f"{killed_at - started:.0f}s in; lake rows {len(lake_ids)} (duplicates {lake_dup}, "
        f"missing {lake_missing}); effects {len(rows)} (duplicates {effect_dup}, missing "
        f"{effect_missing}; consumer {stats}); find-hanging: {left_open or 'none'}; "
        f"test {time.monotonic() - started:.0f}s ({', '.join(laps)})"
    )
    assert (lake_dup, lake_missing, effect_dup, effect_missing) == (0, 0, 0, 0)
    assert audit.returncode == 0, audited
    assert f"events: rows={unique} distinct={unique} duplicates=0 " in audited, audited
    assert stats.processed == unique, stats  # the handler ran once per id, repeats or not
    record(
        reliability,
        f"C8 HTTP ingest, Spark lake job and idempotent consumer through a kill -9 of the "
        f"leader of the input and clean partitions: clean topic, lake and effects each once "
        f"({unique // 1000}k events over HTTP)",
        events_in,
        1,
        report,
        waited,
    )
    assert not left_open, left_open
