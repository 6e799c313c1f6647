"""Age-out on the real broker with controlled record timestamps: the window's edges, the size cap
(oldest first, cut 1% under it, with the effective window the worker reports), bounded state
over many windows, an identical rebuild from the changelog, and a replay that decides exactly as
the first run."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from rocksdict import AccessType, Options, Rdict

from scripts.topic_reader import read_topic
from tables.rocks import META_CF
from tables.seen_ids.summary import RANK_PREFIX, SUMMARY_KEY
from tables.window import Entry
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

# Record times start an hour ago, on a whole second: the broker deletes data by record time
# (retention.ms, 7 days), so much older timestamps would make it drop the test's own records.
T0 = (int(time.time()) - 3600) * 1000
Send = tuple[str, int]  # (messageId, record timestamp ms)


def value(mid: str) -> bytes:
    return json.dumps({"type": "track", "event": "Age", "messageId": mid}).encode()


async def send(bootstrap: str, topic: str, records: list[Send]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = [
            await producer.send(topic, value(mid), key=mid.encode(), timestamp_ms=ts, partition=0)
            for mid, ts in records
        ]
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def stats(worker: Worker) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.web_port}/stats", timeout=10) as r:
        body: dict[str, Any] = json.load(r)
    return body["partitions"]["0"]


def start(broker: Broker, names: Names, workers: list[Worker], **env: str) -> Worker:
    worker = Worker(broker, names, partitions=1, extra_env=env)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    return worker


def feed(broker: Broker, names: Names, workers: list[Worker], records: list[Send]) -> None:
    asyncio.run(send(broker.bootstrap, names.input_topic, records))
    wait_drained(broker, names, timeout=300, workers=workers)


def output(broker: Broker, topic: str) -> list[tuple[bytes | None, int]]:
    return [(r.key, r.timestamp_ms) for r in asyncio.run(read_topic(broker.bootstrap, topic))]


def test_repeats_at_0_half_and_w_minus_1_are_dropped_at_w_and_after_forwarded(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    w = 60_000
    start(broker, names, workers, DEDUPE_WINDOW="60s", DEDUPE_BUCKET="1s")
    records = [
        ("a", T0),
        ("a", T0),  # 0
        ("a", T0 + w // 2),
        ("a", T0 + w - 1),
        ("b", T0),
        ("b", T0 + w),  # W itself is outside the window
        ("c", T0),
        ("c", T0 + w + 1),
        ("c", T0 + w + 2),  # a repeat of c's new first sighting
    ]
    feed(broker, names, workers, records)
    assert output(broker, names.output_topic) == [
        (b"a", T0),
        (b"b", T0),
        (b"b", T0 + w),
        (b"c", T0),
        (b"c", T0 + w + 1),
    ]


def test_the_size_cap_evicts_oldest_first_and_the_window_shrinks(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = start(
        broker,
        names,
        workers,
        DEDUPE_MAX_IDS_PER_PARTITION="100",
        DEDUPE_EVICTION_BATCH="8",
        DEDUPE_MIN_WINDOW="10d",
        DEDUPE_BUCKET="16s",  # slots of a second: the oldest slot held is the oldest id's second
    )
    ids = [f"id-{i:03d}" for i in range(300)]
    feed(broker, names, workers, [(m, T0 + 1000 * i) for i, m in enumerate(ids)])
    # The cap cuts the oldest ids down to 99 (the cap less 1%) each time a new id makes 101, so
    # after 300 ids 100 are held; repeats of the newest id: dropped, each one deleting up to 8
    # of the ids cut.
    feed(broker, names, workers, [(ids[-1], T0 + 299_000)] * 40)
    s = stats(worker)
    assert s["ids_held"] == 100
    assert s["evicted"] == 200 and s["expired"] == 0
    assert s["oldest_first_seen_ms"] == T0 + 200_000  # ids 200..299 are the ones left
    assert s["newest_first_seen_ms"] == T0 + 299_000
    assert s["effective_window_ms"] == 99_000
    assert "effective dedup window is" in worker.log_text()

    later = T0 + 400_000
    feed(broker, names, workers, [(m, later) for m in ids[250:]])  # still held: dropped
    feed(broker, names, workers, [(m, later + i) for i, m in enumerate(ids[150:200])])  # evicted
    out = [k for k, _ in output(broker, names.output_topic)]
    assert out == [m.encode() for m in ids + ids[150:200]]
    s = stats(worker)
    assert s["ids_held"] == 100
    assert s["oldest_first_seen_ms"] == T0 + 250_000  # 200..249 made room for 150..199


def store_state(
    data_dir: Path,
) -> tuple[dict[bytes, bytes], dict[bytes, int], bytes | None]:
    """(ids, counts per rank, summary: ids held, next sequence, newest first sighting) of the
    single partition's database, opened read-only."""
    [path] = sorted(data_dir.rglob("seen_ids-*.db"))
    opts = Options(raw_mode=True)
    db = Rdict(str(path), opts, column_families={META_CF: opts}, access_type=AccessType.read_only())
    meta = db.get_column_family(META_CF)
    try:
        raw_summary = meta.get(SUMMARY_KEY)
        counts = {
            k: int.from_bytes(v, "big")
            for k, v in meta.items(from_key=RANK_PREFIX)
            if k.startswith(RANK_PREFIX)
        }
        return dict(db.items()), counts, raw_summary[:24] if raw_summary else None
    finally:
        meta.close()
        db.close()


def this_start(worker: Worker) -> str:
    """The worker's log since its latest start."""
    return worker.log_text().rsplit("===== start", 1)[-1]


def test_state_stays_bounded_over_many_windows_and_rebuilds_identically(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = start(
        broker,
        names,
        workers,
        DEDUPE_WINDOW="20s",
        DEDUPE_BUCKET="1s",
        DEDUPE_ALLOWED_LATENESS="0",
        DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES="262144",
    )
    per_second, seconds, parts = 200, 800, 8  # 40 windows of 20 s, 160,000 ids, in 8 parts
    records = [(f"s{t}-{i}", T0 + 1000 * t + i) for t in range(seconds) for i in range(per_second)]
    sizes = []
    for part in range(parts):
        chunk = records[part * len(records) // parts : (part + 1) * len(records) // parts]
        feed(broker, names, workers, chunk)
        # Age-out runs as records are processed (DEDUPE_EVICTION_BATCH = 64 ids per record) and
        # reaches committed ids only. A whole part may arrive in one fetch and commit as one
        # batch and transaction, so repeats sent after it committed drive age-out through it.
        feed(broker, names, workers, [chunk[-1]] * 400)
        sizes.append(sum(f.stat().st_size for f in worker.data_dir.rglob("*") if f.is_file()))
    s = stats(worker)
    print(f"\nids held {s['ids_held']} expired {s['expired']}; data dir bytes per part {sizes}")
    # 20 s of ids plus at most one bucket past the window, of 80,000 seen
    assert 20 * per_second <= s["ids_held"] <= 22 * per_second
    assert s["expired"] == len(records) - s["ids_held"]
    # Linear growth would make the largest of the last four sizes 4x the largest of the first
    # two (8 parts against 2). Flushes and compactions make the size swing by about 2x around a
    # level set by the ids held, so no single size is the reference: a CI run measured the
    # first part at 455,085 bytes against 942,400-961,412 in others (then 2,059,381 at most).
    early, late = max(sizes[:2]), max(sizes[4:])
    assert late < 3 * early, "local state grows with the ids seen, not held"
    assert len(output(broker, names.output_topic)) == len(records)

    worker.kill(signal.SIGTERM)
    live = store_state(worker.data_dir)
    assert len(live[0]) == s["ids_held"] == sum(live[1].values())
    shutil.rmtree(worker.data_dir)  # rebuild everything from the changelog
    worker.start()
    rebuild_s = worker.wait_ready()
    worker.kill(signal.SIGTERM)
    rebuilt = store_state(worker.data_dir)
    assert rebuilt[0] == live[0]  # the same ids with the same first sightings and sequences
    assert rebuilt[1] == live[1]  # the same counts
    assert rebuilt[2] == live[2]  # the same count, next sequence and newest first sighting
    # The bulk restorer rebuilt every partition of the ids' changelog, into empty stores (so
    # without the write-ahead log), through the commit marker that ends each one.
    rebuild_log = this_start(worker)
    done = "restored " + names.app_id + "-seen_ids-changelog-"
    assert rebuild_log.count(done) == worker.partitions, rebuild_log[-4000:]
    assert rebuild_log.count("write-ahead log off") >= worker.partitions
    # ... and the rebuilt state holds the changelog through the markers: a restart on it has
    # nothing left to restore.
    worker.start()
    restart_s = worker.wait_ready()
    worker.kill(signal.SIGTERM)
    assert "restoring " not in this_start(worker)
    print(f"ready after the rebuild in {rebuild_s:.1f}s, after a restart on it in {restart_s:.1f}s")
    assert {Entry.decode(v).first_seen_ms for v in live[0].values()} >= {T0 + 1000 * (seconds - 1)}


def test_a_replay_of_the_same_input_decides_the_same(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    env = {
        "DEDUPE_WINDOW": "30s",
        "DEDUPE_BUCKET": "1s",
        "DEDUPE_MAX_IDS_PER_PARTITION": "300",
        "DEDUPE_EVICTION_BATCH": "4",
    }
    records: list[Send] = []
    for t in range(120):  # 4 windows; ids repeat at several distances, some beyond W or the cap
        for i in range(10):
            records.append((f"r{t}-{i}", T0 + 1000 * t + i))
            if t >= 5:
                records.append((f"r{t - 5}-{i}", T0 + 1000 * t + 10 + i))
            if t >= 35 and i < 3:
                records.append((f"r{t - 35}-{i}", T0 + 1000 * t + 20 + i))
    first = start(broker, names, workers, **env)
    feed(broker, names, workers, records)
    first.kill(signal.SIGTERM)

    replay = Names(names.suffix + "b", names.data_root / "replay")
    replay_env = {
        **env,
        "DEDUPE_INPUT_TOPIC": names.input_topic,  # the same input, a new group and new state
    }
    second = Worker(broker, replay, partitions=1, index=1, extra_env=replay_env)
    workers.append(second)
    second.start()
    second.wait_ready()
    wait_drained_replay(broker, names.input_topic, replay, workers)

    a = output(broker, names.output_topic)
    b = output(broker, replay.output_topic)
    assert a == b
    assert 120 * 10 < len(a) < len(records)  # some repeats dropped, some forwarded again


def wait_drained_replay(
    broker: Broker, input_topic: str, replay: Names, workers: list[Worker]
) -> None:
    """wait_drained for a worker whose input topic is another test's."""

    class Shared(Names):
        @property
        def input_topic(self) -> str:
            return input_topic

        @property
        def repartition_topic(self) -> str:
            return f"{self.app_id}-{input_topic}-repartition"

    wait_drained(broker, Shared(replay.suffix, replay.data_root), timeout=300, workers=workers)
