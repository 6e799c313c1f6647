"""The worker with ``DEDUPE_PROCESSING_GUARANTEE=at_least_once`` (app/alo.py) on the real broker:
it deduplicates a stream with immediate, late and null-keyed repeats, commits its offsets, and
keeps its ids across a graceful restart. (Crash behaviour is at-least-once by design and not
tested here; the exactly-once guarantees are the default mode's.)"""

from __future__ import annotations

import asyncio
import signal

import pytest

from scripts.streams import build_stream, produce
from scripts.topic_reader import read_topic
from scripts.verify import check
from tests.support import Broker, Names, Worker, wait_drained

pytestmark = pytest.mark.integration

ALO = {"DEDUPE_PROCESSING_GUARANTEE": "at_least_once"}


def test_at_least_once_worker_dedups_and_survives_a_restart(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    stream = build_stream(6_000, 0.10, seed=11)
    first, second = stream.records[:3_000], stream.records[3_000:]
    worker = Worker(broker, names, extra_env=ALO)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, first))
    wait_drained(broker, names, timeout=60, workers=workers)

    # A graceful stop commits; the restarted worker keeps its ids (local RocksDB + changelog).
    assert worker.kill(signal.SIGTERM) == 0
    worker.start()
    worker.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, second))
    wait_drained(broker, names, timeout=60, workers=workers)

    log = worker.log_text()
    assert "at-least-once: plain producer started" in log
    assert "transactional producers ready" not in log

    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    expected = {m.encode(): v for m, v in stream.unique.items()}
    headers = {m.encode(): (("content-type", b"application/json"),) for m in stream.unique}
    report = check(names.output_topic, records, expected, headers)
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)
    assert report.total == 6_000
    # No transactions: a read_uncommitted reader sees the same records (no commit markers).
    uncommitted = asyncio.run(
        read_topic(broker.bootstrap, names.output_topic, isolation_level="read_uncommitted")
    )
    assert len(uncommitted) == len(records)
    assert asyncio.run(read_topic(broker.bootstrap, names.dlq_topic)) == []
