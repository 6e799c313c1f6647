"""The workers' status endpoints on real workers: any worker answers /messages/{id} (routing to
the owner), with the first sighting, the clean copy's partition and offset and the repeats
dropped; /stats, /metrics and /ready agree with what went through; rebalances are timed
without Faust's "Missing sensor state" warnings."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from app.rules import partition_for
from scripts.streams import build_stream, produce
from scripts.topic_reader import read_topic
from tests.support import Broker, Names
from tests.workers import Worker, get, wait_drained

pytestmark = pytest.mark.integration


def both_ready(a: Worker, b: Worker, partitions: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        (sa, ra), (sb, rb) = get(a, "/ready"), get(b, "/ready")
        if (
            sa == sb == 200
            and sorted(ra["partitions"] + rb["partitions"]) == list(range(partitions))
            and ra["partitions"]
            and rb["partitions"]
        ):
            return
        time.sleep(0.5)
    raise AssertionError(f"workers not ready: {get(a, '/ready')} {get(b, '/ready')}")


def test_status_endpoints_with_two_workers(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    counted = {"DEDUPE_COUNT_REPEATS": "true"}  # repeats_dropped per id (off: null)
    a = Worker(broker, names, index=0, partitions=4, extra_env=counted)
    b = Worker(broker, names, index=1, partitions=4, extra_env=counted)
    workers.extend([a, b])
    a.start()
    a.wait_ready()
    b.start()
    both_ready(a, b, 4)
    stream = build_stream(2_000, 0.2, seed=31)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, timeout=180, workers=workers)
    both_ready(a, b, 4)

    out = {r.key: r for r in asyncio.run(read_topic(broker.bootstrap, names.output_topic))}
    copies = Counter(r.message_id for r in stream.records)
    owned_by_a = set(get(a, "/ready")[1]["partitions"])
    sample = list(stream.unique)[:40]
    assert {partition_for(m.encode(), 4) in owned_by_a for m in sample} == {True, False}
    for mid in sample:
        rec = out[mid.encode()]
        for asked in (a, b):  # the owner answers, the other one routes to it
            status, body = get(asked, f"/messages/{mid}")
            assert status == 200, body
            assert body["held"] is True
            assert body["first_seen_ms"] == rec.timestamp_ms
            assert body["output"] == {
                "topic": names.output_topic,
                "partition": rec.partition,
                "offset": rec.offset,
            }
            assert body["repeats_dropped"] == copies[mid] - 1
    assert get(a, "/messages/never-sent")[0] == 404
    assert get(b, "/messages/never-sent")[0] == 404

    stats = {**get(a, "/stats")[1]["partitions"], **get(b, "/stats")[1]["partitions"]}
    assert sorted(stats) == ["0", "1", "2", "3"]
    assert sum(s["ids_held"] for s in stats.values()) == len(stream.unique)
    assert all(s["state"] == "running" and s["commits"] > 0 for s in stats.values())
    # records reach the agent in batches (app.eos.Consumer), not one by one
    handled = sum(s["forwarded"] + s["duplicates_dropped"] for s in stats.values())
    assert 0 < sum(s["batches"] for s in stats.values()) < handled
    assert all(s["consumer_lag"] in (0, None) for s in stats.values())  # input: exact
    assert all(isinstance(s["repartition_lag"], int | None) for s in stats.values())
    status, text = get(a, "/metrics")
    assert status == 200
    assert "dedupe_ids_held{partition=" in text
    assert "dedupe_commit_seconds_bucket" in text
    assert 'dedupe_records_total{outcome="forwarded"' in text or "dedupe_records_total{" in text
    # a started at rebalance #1 and rebalanced when b joined: timed, and no warning about it
    timed = [
        line for line in text.splitlines() if line.startswith("dedupe_rebalance_seconds_count")
    ]
    assert len(timed) == 1 and float(timed[0].split()[-1]) >= 2, timed
    for w in (a, b):
        assert "Missing sensor state" not in w.log_text()
