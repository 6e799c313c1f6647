"""F18: the ingest service's link to Kafka cut while the Segment SDK retries; every event on the
input topic exactly once."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from segment.analytics.client import Client

from scripts.topic_reader import read_topic
from tests.faults.conftest import SCALE, Reliability
from tests.faults.network.support import Net, proxy_line
from tests.faults.proxy import Link
from tests.faults.scenario import drain_and_verify, record
from tests.ingest.support import WRITE_KEY, IngestProcess, records_in
from tests.support import Names
from tests.workers import Worker

pytestmark = pytest.mark.faults


def test_f18_ingest_link_cut_while_the_sdk_retries(
    net: Net,
    links: list[Link],
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    tmp_path: Path,
) -> None:
    """The ingest service's link to Kafka is cut (both directions) for 8 s, twice, while the
    official Segment SDK sends 4,000 events: requests answer 503 after the 2 s ack timeout,
    the SDK retries them, and every event comes out of the (unproxied) worker exactly once."""
    worker = Worker(net.broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    service = IngestProcess(
        net.via(2),
        names.input_topic,
        tmp_path / "ingest.log",
        extra_env={"DEDUPE_INGEST_ACK_TIMEOUT": "2s"},
    )
    service.start()
    service.wait_ready()
    sent: list[str] = []
    cuts: list[tuple[float, float]] = [(3.0, 11.0), (16.0, 24.0)]  # seconds into the feed
    events = 4_000 * SCALE
    per_second = events / 28
    started = time.monotonic()
    errors: list[Any] = []
    client = Client(
        WRITE_KEY,
        host=service.url,
        upload_size=50,
        max_queue_size=events + 1,  # the queue grows during the cuts (40,000 events at 10x)
        on_error=lambda error, batch: errors.append(error),
    )
    try:
        for i in range(events):
            now = time.monotonic() - started
            cut = any(a <= now < b for a, b in cuts)
            if cut and not links[2].is_cut:
                links[2].cut("both")
            elif not cut and links[2].is_cut:
                links[2].heal()
            ok, msg = client.track(f"user-{i % 50}", "Product Viewed", {"n": i})
            assert ok
            sent.append(msg["messageId"])
            time.sleep(max(0.0, (i + 1) / per_second - (time.monotonic() - started)))
        links[2].heal()
        client.flush()
    finally:
        links[2].heal()  # also after a failure: a shutdown with the link cut never ends
        client.shutdown()
        service.stop()
    assert errors == []
    log_text = service.log_text()
    written = records_in(net.broker, names.input_topic)
    answered_503 = log_text.count("-> 503 kafka_unavailable")
    report, waited = drain_and_verify(net.broker, names, [worker])
    clean = asyncio.run(read_topic(net.broker.bootstrap, names.output_topic))
    print(
        f"\nF18: {len(cuts)} cuts of 8 s, input topic {written:,} records for {len(sent):,} events "
        f"({written - len(sent)} written again), 503s logged: {answered_503}; " + proxy_line(links)
    )
    record(
        reliability,
        "F18 ingest service's link to Kafka cut (8 s, x2) while the Segment SDK retries",
        written,
        len(cuts),
        report,
        waited,
    )
    assert len(set(sent)) == len(sent)
    assert sorted(r.key or b"" for r in clean) == sorted(m.encode() for m in sent)
    assert answered_503 > 0, "no request met the cut"
