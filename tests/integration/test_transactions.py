"""The transaction properties of the worker, each on the real broker:

- output is inside the transaction: read_uncommitted readers see it before read_committed ones;
- read_committed readers see output within about the commit interval;
- transactional ids are ``<app id>-<input topic>-<partition>``, the same after a restart;
- a fenced producer stops work on its partition, the worker rejoins, nothing is duplicated;
- after a restart the local store holds exactly the committed changelog;
- a topic with another partition count makes the worker refuse to start.
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from rocksdict import AccessType, Options, Rdict

from scripts.streams import build_stream, produce
from scripts.topic_reader import committed_offsets, read_topic
from scripts.verify import check
from tables.keys import from_disk
from tables.rocks import META_CF
from tables.source_offsets import SOURCE_OFFSETS_KEY, decode_source_offsets
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration


def transactional_ids(broker: Broker) -> set[str]:
    result = broker.script("transactions", "--bootstrap-server", broker.bootstrap, "list")
    assert result.returncode == 0, result.stderr
    return {line.split()[0] for line in result.stdout.splitlines()[1:] if line.strip()}


def test_output_is_invisible_to_read_committed_until_the_commit(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    # The worker writes a transaction's records at its commit; the fault point holds the first
    # commit for 5 s after they are written (acknowledged) and before the commit request.
    worker = Worker(
        broker, names, partitions=1, extra_env={"DEDUPE_FAULT_INJECTION": "commit=pause@1"}
    )
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    stream = build_stream(50, 0.0, seed=3)
    sent_at = time.monotonic()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    seen: list[tuple[int, int]] = []  # (read_uncommitted, read_committed) output records
    while time.monotonic() - sent_at < 30:
        dirty = asyncio.run(
            read_topic(broker.bootstrap, names.output_topic, isolation_level="read_uncommitted")
        )
        clean = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
        seen.append((len(dirty), len(clean)))
        if len(clean) == 50:
            break
        time.sleep(0.1)
    # while the first transaction's output was in the log, read_committed readers saw none of it
    assert any(dirty > 0 and clean == 0 for dirty, clean in seen), seen[:50]
    assert len(clean) == 50


def test_read_committed_readers_see_output_within_about_the_commit_interval(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, extra_env={"DEDUPE_COMMIT_INTERVAL": "100ms"})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    latencies = []
    for i in range(5):
        stream = build_stream(1, 0.0, seed=100 + i)
        sent_at = time.monotonic()
        asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
        while len(asyncio.run(read_topic(broker.bootstrap, names.output_topic))) < i + 1:
            assert time.monotonic() - sent_at < 20, "output never became visible"
        latencies.append(time.monotonic() - sent_at)
    print(f"\nproduce -> visible to read_committed: {[f'{x:.2f}s' for x in latencies]}")
    # A loose functional bound (not a speed goal): commits happen on the interval, without
    # waiting for more input or for Faust's 2.8 s commit timer. Reading costs ~0.2 s a poll.
    assert sorted(latencies)[2] < 2.0


def test_transactional_ids_are_stable_per_input_partition(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=4)
    workers.append(worker)
    expected = {f"{names.app_id}-{names.input_topic}-{p}" for p in range(4)}
    stream = build_stream(2_000, 0.1, seed=5)
    for run in range(2):
        worker.start()
        worker.wait_ready()
        asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
        wait_drained(broker, names, timeout=120, workers=workers)
        ours = {t for t in transactional_ids(broker) if t.startswith(f"{names.app_id}-")}
        assert ours == expected, f"run {run}"
        worker.kill(signal.SIGTERM)
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): v for m, v in stream.unique.items()})
    assert report.exactly_once, report.line()


def test_a_fenced_partition_stops_and_the_worker_rejoins(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=4)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    first = build_stream(3_000, 0.1, seed=8)
    asyncio.run(produce(broker.bootstrap, names.input_topic, first.records[:1_500]))

    async def fence() -> None:
        # A second producer with partition 0's transactional id: InitProducerId fences the
        # worker's producer, whose next transactional request fails with ProducerFenced.
        zombie_killer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap,
            transactional_id=f"{names.app_id}-{names.input_topic}-0",
        )
        await zombie_killer.start()
        await zombie_killer.stop()

    asyncio.run(fence())
    asyncio.run(produce(broker.bootstrap, names.input_topic, first.records[1_500:]))
    wait_drained(broker, names, timeout=180, workers=workers)
    log = worker.log_text()
    assert "was fenced" in log
    assert log.count("starting transactional producers") >= 2  # the task restarted
    assert worker.alive()
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): v for m, v in first.unique.items()})
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)


def local_store(data_dir: Path) -> tuple[dict[bytes, bytes], dict[int, dict[str, int]]]:
    """Every id in the worker's RocksDB databases (opened read-only after it stopped), as
    written, and per
    partition the source offsets of the last transaction each database holds."""
    opts = Options(raw_mode=True)
    out: dict[bytes, bytes] = {}
    sources: dict[int, dict[str, int]] = {}
    paths = sorted(data_dir.rglob("seen_ids-*.db"))
    assert paths, f"no databases under {data_dir}"
    for path in paths:
        db = Rdict(
            str(path),
            opts,
            column_families={META_CF: Options(raw_mode=True)},
            access_type=AccessType.read_only(),
        )
        # The default column family holds the ids only, UUIDs in their 16-byte form.
        out.update((from_disk(k), v) for k, v in db.items())
        meta = db.get_column_family(META_CF)
        raw = meta.get(SOURCE_OFFSETS_KEY)
        sources[int(path.name.split("-")[-1].removesuffix(".db"))] = (
            {} if raw is None else decode_source_offsets(raw)
        )
        meta.close()
        db.close()
    return out, sources


def test_after_a_restart_the_store_equals_the_committed_changelog(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=4)
    workers.append(worker)
    stream = build_stream(5_000, 0.1, seed=9)
    worker.start()
    worker.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[:3_000]))
    time.sleep(1.5)
    worker.kill(signal.SIGKILL)  # mid-stream: some transactions are left open
    worker.start()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[3_000:]))
    wait_drained(broker, names, timeout=180, workers=workers)
    worker.kill(signal.SIGTERM)

    changelog: dict[bytes, bytes] = {}
    for rec in asyncio.run(read_topic(broker.bootstrap, names.changelog_topic)):
        assert rec.key is not None
        if rec.key == SOURCE_OFFSETS_KEY:
            continue  # each transaction's source offsets: kept apart from the ids (below)
        if rec.value is None:
            changelog.pop(rec.key, None)
        else:
            changelog[rec.key] = rec.value
    store, sources = local_store(worker.data_dir)
    assert store == changelog
    assert set(store) == {m.encode() for m in stream.unique}
    # Each database also holds the source offsets of its last transaction, which committed
    # together with the group's offsets: the two agree.
    committed = asyncio.run(committed_offsets(broker.bootstrap, names.app_id))
    for p in range(4):
        group = {tp.topic: off for tp, off in committed.items() if tp.partition == p}
        assert {t: sources[p].get(t) for t in group} == group, (p, sources[p], group)


def test_refuses_to_start_when_a_topic_has_another_partition_count(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(names.output_topic, 3, 1)])
        finally:
            await admin.close()

    asyncio.run(create())
    worker = Worker(broker, names, partitions=4)
    workers.append(worker)
    worker.start()
    assert worker.proc is not None
    code = worker.proc.wait(60)
    assert code != 0
    log = worker.log_text()
    assert "refusing to start" in log
    assert f"output topic '{names.output_topic}' has 3 partitions, DEDUPE_PARTITIONS is 4" in log
