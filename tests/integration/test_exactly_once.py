"""100,000 events with 10% repeats through a real worker on the real broker: the clean topic,
read with read_committed, holds exactly the unique set, each once, byte-identical; Kafka's own
console consumer agrees."""

from __future__ import annotations

import asyncio
import time

import pytest

from scripts.streams import build_stream, produce
from scripts.topic_reader import read_topic
from scripts.verify import check
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration


def console_consumer_keys(broker: Broker, topic: str, expected: int) -> list[str]:
    """Keys of ``topic`` as Kafka's console consumer prints them with read_committed."""
    result = broker.script(
        "console-consumer",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--from-beginning",
        "--isolation-level",
        "read_committed",
        "--formatter-property",
        "print.key=true",
        "--formatter-property",
        "print.value=false",
        "--max-messages",
        str(expected + 1),
        "--timeout-ms",
        "15000",
        timeout=300,
    )
    return [line for line in result.stdout.splitlines() if line.strip()]


def test_100k_events_with_10_percent_repeats_come_out_once(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    stream = build_stream(100_000, 0.10, seed=2)
    assert stream.duplicates == 10_000
    assert sum(r.key is None for r in stream.records) > 1_000  # null-keyed copies are in it
    worker = Worker(broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    started = time.monotonic()
    sent = asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    assert sent == 110_000
    wait_drained(broker, names, timeout=600, workers=workers)
    elapsed = time.monotonic() - started
    print(f"\n110,000 records deduplicated in {elapsed:.1f}s ({sent / elapsed:,.0f} records/s)")

    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    expected = {m.encode(): v for m, v in stream.unique.items()}
    headers = {m.encode(): (("content-type", b"application/json"),) for m in stream.unique}
    report = check(names.output_topic, records, expected, headers)
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)
    assert report.total == 100_000
    # each output record sits in the partition its key hashes to (co-partitioned)
    from app.rules import partition_for

    assert all(r.partition == partition_for(r.key or b"", 4) for r in records)

    keys = console_consumer_keys(broker, names.output_topic, len(expected))
    assert len(keys) == 100_000
    assert {k.encode() for k in keys} == set(expected)

    assert asyncio.run(read_topic(broker.bootstrap, names.dlq_topic)) == []
