"""Bad requests against the real ingest process and the real broker: each gets its status and a
clear JSON error, and nothing reaches Kafka (the input topic stays empty)."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app import rules
from scripts.topic_admin import create_topics
from scripts.topic_reader import read_topic_sync
from tests.ingest.cases import BAD_REQUESTS, BadRequest
from tests.ingest.support import IngestProcess, json_headers, records_in
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.integration


def request(url: str, case: BadRequest) -> tuple[int, dict[str, str], Any]:
    req = urllib.request.Request(
        url + case.path,
        data=case.body if case.method == "POST" else None,
        headers=case.headers,
        method=case.method,
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), json.loads(resp.read())
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), json.loads(err.read())


@pytest.fixture(scope="module")
def service(broker: Broker, tmp_path_factory: pytest.TempPathFactory) -> Iterator[IngestProcess]:
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 4))
    log = Path(tmp_path_factory.mktemp("ingest")) / "ingest.log"
    proc = IngestProcess(broker, topic, log)
    proc.start()
    proc.wait_ready()
    yield proc
    assert proc.stop() == 0, proc.log_text()[-3000:]  # SIGTERM: a clean, graceful exit


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c.name for c in BAD_REQUESTS])
def test_bad_request_is_answered_with_its_status_and_nothing_reaches_kafka(
    broker: Broker, service: IngestProcess, case: BadRequest
) -> None:
    status, headers, body = request(service.url, case)
    assert status == case.status, body
    assert headers["Content-Type"].startswith("application/json")
    assert body["success"] is False and body["code"] == case.code
    assert case.fragment in body["error"], body["error"]
    assert records_in(broker, service.topic) == 0


def test_accepted_events_land_in_the_partition_the_worker_expects(
    broker: Broker, tmp_path: Path
) -> None:
    """Each event in the partition Kafka's default partitioner gives its messageId (the
    worker's placement rule), so the worker never re-keys what the service sent."""
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 8))
    proc = IngestProcess(broker, topic, tmp_path / "ingest.log")
    proc.start()
    try:
        proc.wait_ready()
        ids = [f"m-{i}-{unique_suffix()}" for i in range(300)]
        batch = {
            "batch": [{"type": "track", "event": "E", "userId": "u", "messageId": m} for m in ids]
        }
        req = urllib.request.Request(
            proc.url + "/v1/batch",
            data=json.dumps(batch).encode(),
            headers=json_headers(),
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
        single = {"type": "track", "event": "E", "userId": "u", "messageId": "m-single"}
        req = urllib.request.Request(
            proc.url + "/v1/track",
            data=json.dumps(single).encode(),
            headers=json_headers(),
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert resp.status == 200
    finally:
        assert proc.stop() == 0, proc.log_text()[-3000:]
    records = read_topic_sync(broker.bootstrap, topic)
    assert sorted(r.key for r in records if r.key) == sorted(m.encode() for m in [*ids, "m-single"])
    misplaced = [r for r in records if r.partition != rules.partition_for(r.key or b"", 8)]
    assert misplaced == []
    assert len({r.partition for r in records}) == 8
