"""The real ingest service names each event's source from its write key (``source:key`` in
DEDUPE_WRITE_KEYS): the records it produces to the real broker carry ``dedupe.source``, which the
worker's per-source policies and scope read; a key without a source adds no header."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.request
from pathlib import Path

import pytest

from scripts.topic_admin import create_topics
from scripts.topic_reader import read_topic
from tests.ingest.support import IngestProcess
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.integration


def track(url: str, write_key: str, message_id: str) -> int:
    auth = base64.b64encode(f"{write_key}:".encode()).decode()
    body = json.dumps({"userId": "u1", "event": "Signed Up", "messageId": message_id}).encode()
    req = urllib.request.Request(
        url + "/v1/track",
        data=body,
        headers={"Content-Type": "application/json", "Authorization": f"Basic {auth}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.status


def test_events_carry_the_source_of_their_write_key(broker: Broker, tmp_path: Path) -> None:
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 4))
    proc = IngestProcess(broker, topic, tmp_path / "ingest.log", write_keys="web:wk-web,wk-plain")
    proc.start()
    try:
        proc.wait_ready()
        assert track(proc.url, "wk-web", "from-web") == 200
        assert track(proc.url, "wk-plain", "from-plain") == 200
    finally:
        assert proc.stop() == 0, proc.log_text()[-3000:]
    records = {r.key: dict(r.headers) for r in asyncio.run(read_topic(broker.bootstrap, topic))}
    assert records[b"from-web"] == {"content-type": b"application/json", "dedupe.source": b"web"}
    assert records[b"from-plain"] == {"content-type": b"application/json"}
