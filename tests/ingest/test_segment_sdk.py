"""The official Segment Python SDK (segment-analytics-python), pointed at the ingest service,
delivers a few thousand events that come out of a real dedup worker exactly once -- also when
the ingest process dies between Kafka's acknowledgement and its answer, and the SDK retries."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import segment.analytics as analytics
from segment.analytics.client import Client

from app.rules import partition_for
from scripts.topic_reader import read_topic
from scripts.verify import check
from tests.ingest.support import WRITE_KEY, IngestProcess, records_in
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4


def start_worker(broker: Broker, names: Names, workers: list[Worker]) -> None:
    """A worker; it creates the input topic."""
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()


@pytest.fixture
def service(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> Iterator[IngestProcess]:
    """A worker, then the ingest process."""
    start_worker(broker, names, workers)
    proc = IngestProcess(broker, names.input_topic, tmp_path / "ingest.log")
    proc.start()
    proc.wait_ready()
    yield proc
    proc.stop()


def verify_clean(
    broker: Broker, names: Names, workers: list[Worker], sent_ids: list[str]
) -> tuple[int, int]:
    """The clean topic holds exactly the SDK's messageIds, each once; returns (total, dups)."""
    wait_drained(broker, names, timeout=120, workers=workers)
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): b"" for m in sent_ids})
    assert report.duplicates == 0, report.line() + "\n" + "\n".join(report.examples)
    assert (report.missing, report.unexpected) == (0, 0), "\n".join(report.examples)
    for r in records:
        doc = json.loads(r.value or b"")
        assert r.key == doc["messageId"].encode()
        assert r.partition == partition_for(r.key or b"", PARTITIONS)
        assert doc["context"]["library"]["name"] == "analytics-python"
        assert "receivedAt" in doc and "sentAt" in doc
    return report.total, report.duplicates


def test_segment_sdk_events_come_out_exactly_once(
    broker: Broker, names: Names, workers: list[Worker], service: IngestProcess
) -> None:
    errors: list[Any] = []
    analytics.write_key = WRITE_KEY
    analytics.host = service.url
    analytics.on_error = lambda error, batch: errors.append(error)
    analytics.default_client = None
    sent: list[str] = []
    try:
        started = time.monotonic()
        for i in range(3_000):
            ok, msg = analytics.track(f"user-{i % 50}", "Order Completed", {"n": i, "total": 9.5})
            assert ok
            sent.append(msg["messageId"])
        for i in range(100):
            for ok, msg in (
                analytics.identify(f"user-{i}", {"plan": "pro"}),
                analytics.page(f"user-{i}", "Docs", "Install"),
                analytics.group(f"user-{i}", f"org-{i % 5}", {"name": "Acme"}),
            ):
                assert ok
                sent.append(msg["messageId"])
        analytics.flush()
        elapsed = time.monotonic() - started
    finally:
        analytics.shutdown()
        analytics.default_client = None
    assert errors == []
    assert len(set(sent)) == len(sent) == 3_300
    total, duplicates = verify_clean(broker, names, workers, sent)
    assert total == 3_300
    print(
        f"\nSegment SDK: sent {len(sent):,} events in {elapsed:.1f}s "
        f"({len(sent) / elapsed:,.0f} events/s), clean topic: {total:,} distinct, "
        f"duplicates={duplicates}"
    )


def test_sdk_retries_through_an_ingest_crash_without_duplicates(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    """The ingest process dies (os._exit, like kill -9) right after Kafka acknowledged a batch
    and before answering it: the SDK's retry writes that batch again, and the worker drops
    every copy."""
    start_worker(broker, names, workers)
    service = IngestProcess(
        broker,
        names.input_topic,
        tmp_path / "ingest.log",
        extra_env={"DEDUPE_INGEST_CRASH_AFTER_ACKS": "20"},
    )
    service.start()
    service.wait_ready()
    errors: list[Any] = []
    client = Client(
        WRITE_KEY,
        host=service.url,
        gzip=True,
        upload_size=50,
        on_error=lambda error, batch: errors.append(error),
    )
    sent: list[str] = []
    try:
        for i in range(4_000):
            ok, msg = client.track(f"user-{i % 50}", "Product Viewed", {"n": i})
            assert ok
            sent.append(msg["messageId"])
        assert service.proc is not None
        assert service.proc.wait(60) == 137, service.log_text()[-3000:]
        acked_before_crash = records_in(broker, names.input_topic)
        service.extra_env = {}
        service.start()  # same port; the SDK has been retrying meanwhile
        service.wait_ready()
        client.flush()
    finally:
        client.shutdown()
        service.stop()
    assert errors == []
    assert "fault injection: exiting after 20 acknowledged requests" in service.log_text()
    written = records_in(broker, names.input_topic)
    assert 0 < written - len(sent) <= 50  # the unanswered batch was written twice
    total, duplicates = verify_clean(broker, names, workers, sent)
    assert total == 4_000
    print(
        f"\nSegment SDK through an ingest crash after {acked_before_crash:,} acked events: "
        f"sent {len(sent):,}, input topic {written:,} records ({written - len(sent)} written "
        f"twice), clean topic {total:,} distinct, duplicates={duplicates}"
    )
