"""Events sent over real HTTP to the ingest service come out of a real dedup worker exactly once,
including browser beacons (text/plain JSON, analytics.js's paths), requests that are retried
whole and requests that failed part way and were retried.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.errors import KafkaConnectionError

from app.rules import partition_for
from ingest.app import create_app
from ingest.events import Prepared
from ingest.settings import IngestSettings
from ingest.sink import KafkaSink
from scripts.topic_reader import Record, read_topic
from scripts.verify import check
from tests.ingest.cases import sdk_event
from tests.ingest.support import WRITE_KEY, IngestProcess, json_headers, records_in
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4


def start_worker(broker: Broker, names: Names, workers: list[Worker]) -> Worker:
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()  # the worker creates the input topic
    return worker


def clean_records(broker: Broker, names: Names, workers: list[Worker]) -> list[Record]:
    wait_drained(broker, names, timeout=120, workers=workers)
    return asyncio.run(read_topic(broker.bootstrap, names.output_topic))


def assert_exactly_once(records: list[Record], expected_n: set[int], topic: str) -> None:
    """Each event (``properties.n``) once, keyed and placed by its messageId, nothing else."""
    report = check(topic, records)
    assert report.duplicates == 0, report.line() + "\n" + "\n".join(report.examples)
    counts = Counter(json.loads(r.value or b"")["properties"]["n"] for r in records)
    assert set(counts) == expected_n, f"missing {sorted(expected_n - set(counts))[:10]}"
    assert max(counts.values()) == 1
    for r in records:
        doc = json.loads(r.value or b"")
        assert r.key == doc["messageId"].encode()
        assert r.partition == partition_for(r.key, PARTITIONS)
        assert doc["receivedAt"].endswith("Z")


def plain(n: int) -> dict[str, Any]:
    """An event without messageId: the service derives one from its content."""
    return {"type": "track", "event": "Clicked", "userId": f"u{n % 7}", "properties": {"n": n}}


async def post_all(url: str, requests: Sequence[tuple[str, bytes, dict[str, str]]]) -> list[int]:
    statuses = []
    async with aiohttp.ClientSession() as session:
        for path, body, headers in requests:
            async with session.post(url + path, data=body, headers=headers) as resp:
                statuses.append(resp.status)
                await resp.read()
    return statuses


def test_http_events_come_out_once_and_retried_requests_are_not_duplicated(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    start_worker(broker, names, workers)
    service = IngestProcess(broker, names.input_topic, tmp_path / "ingest.log")
    service.start()
    service.wait_ready()

    n = iter(range(1_000_000))
    requests: list[tuple[str, bytes, dict[str, str]]] = []
    for b in range(20):  # SDK-style batches with messageIds, every other one gzipped
        raw = json.dumps({"batch": [sdk_event(next(n)) for _ in range(50)]}).encode()
        if b % 2:
            requests.append(("/v1/batch", gzip.compress(raw), json_headers(**_GZIP)))
        else:
            requests.append(("/v1/batch", raw, json_headers()))
    for _ in range(5):  # batches without messageIds
        raw = json.dumps({"batch": [plain(next(n)) for _ in range(20)]}).encode()
        requests.append(("/v1/batch", raw, json_headers()))
    for kind in ("track", "identify", "page", "screen", "group", "alias") * 5:  # single calls
        event = {"userId": "u1", "event": "e", "groupId": "g", "previousId": "p"}
        event["properties"] = {"n": next(n)}
        requests.append((f"/v1/{kind}", json.dumps(event).encode(), json_headers()))
    # Browser beacons as analytics.js sends them: text/plain JSON, the key in the body, short
    # paths (a batch to /v1/b, single calls to /v1/t...).
    raw = json.dumps({"writeKey": WRITE_KEY, "batch": [sdk_event(next(n)) for _ in range(10)]})
    requests.append(("/v1/b", raw.encode(), _BEACON))
    for short in ("t", "i", "p", "s", "g", "a") * 2:
        event = {"userId": "u1", "event": "e", "groupId": "g", "previousId": "p"}
        event.update(writeKey=WRITE_KEY, properties={"n": next(n)})
        requests.append((f"/v1/{short}", json.dumps(event).encode(), _BEACON))
    unique = next(n)
    retries = requests[0:3] + requests[20:23] + requests[-6:]  # same bodies, sent again
    assert all(headers is _BEACON for _, _, headers in requests[-6:])  # beacons retried too
    started = time.monotonic()
    statuses = asyncio.run(post_all(service.url, requests + retries))
    elapsed = time.monotonic() - started
    assert statuses == [200] * (len(requests) + len(retries))

    repeated = 3 * 50 + 3 * 20 + 6
    assert records_in(broker, names.input_topic) == unique + repeated  # the retries were written
    records = clean_records(broker, names, workers)
    assert_exactly_once(records, set(range(unique)), names.output_topic)
    print(
        f"\nHTTP: {len(requests) + len(retries)} requests ({elapsed:.1f}s), "
        f"{unique + repeated} events in, {len(records)} distinct out, duplicates=0"
    )
    assert service.stop() == 0


_GZIP = {"Content-Encoding": "gzip"}
_BEACON = {"Content-Type": "text/plain;charset=UTF-8"}


class FailsPartWay:
    """The real Kafka sink, except that the first request of each body writes only its first
    ``written`` events (really, acknowledged by Kafka) and then fails like a lost connection."""

    def __init__(self, real: KafkaSink, written: int) -> None:
        self.real = real
        self.written = written
        self.failed: set[bytes] = set()

    async def send_all(self, records: Sequence[Prepared], timeout: float) -> None:
        first_key = records[0].key
        if first_key not in self.failed:
            self.failed.add(first_key)
            await self.real.send_all(records[: self.written], timeout)
            raise KafkaConnectionError(
                f"injected: connection lost after {self.written} of {len(records)} events"
            )
        await self.real.send_all(records, timeout)

    async def unready_reason(self, timeout: float) -> str | None:
        return await self.real.unready_reason(timeout)


async def fail_then_retry(settings: IngestSettings, bodies: list[bytes]) -> list[tuple[int, Any]]:
    real = KafkaSink(settings)
    await real.start()
    try:
        app = create_app(settings, sink=FailsPartWay(real, written=30))
        async with TestClient(TestServer(app)) as client:
            answers = []
            for body in bodies:
                for _attempt in range(2):  # the client's retry sends the same bytes
                    resp = await client.post("/v1/batch", data=body, headers=json_headers())
                    answers.append((resp.status, await resp.json()))
            return answers
    finally:
        await real.stop()


def test_a_request_that_failed_part_way_is_retried_without_duplicates(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    start_worker(broker, names, workers)
    settings = IngestSettings(
        bootstrap_servers=broker.bootstrap,
        input_topic=names.input_topic,
        write_keys="test-write-key",
    )
    with_ids = json.dumps({"batch": [sdk_event(i) for i in range(100)]}).encode()
    without_ids = json.dumps({"batch": [plain(i) for i in range(100, 180)]}).encode()
    answers = asyncio.run(fail_then_retry(settings, [with_ids, without_ids]))

    statuses = [status for status, _ in answers]
    assert statuses == [503, 200, 503, 200]
    assert answers[0][1]["code"] == "kafka_unavailable"
    assert "after 30 of 100 events" in answers[0][1]["error"]
    # the first attempts really wrote 30 events each: they are in the input topic twice
    assert records_in(broker, names.input_topic) == 30 + 100 + 30 + 80
    records = clean_records(broker, names, workers)
    assert_exactly_once(records, set(range(180)), names.output_topic)
    print(f"\npart-way failures: 240 events in, {len(records)} distinct out, duplicates=0")
