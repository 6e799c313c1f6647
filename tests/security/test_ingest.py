"""The ingest service on the secured broker as User:dedupe-ingest, whose only ACL is Write (and
Describe) on the input topic: events posted over HTTP reach the topic, once each."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from scripts.topic_reader import read_topic
from tests.ingest.support import WRITE_KEY, IngestProcess, json_headers
from tests.security.conftest import SecureBroker
from tests.support import Names


async def create_input(secure: SecureBroker, names: Names) -> None:
    """The input topic, created as the super user (a worker would create it)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=secure.broker.bootstrap, **secure.client("admin"))
    await admin.start()
    try:
        await admin.create_topics([NewTopic(names.input_topic, 4, 1)])
    finally:
        await admin.close()


def test_ingest_produces_as_its_own_principal(
    secure: SecureBroker, names: Names, tmp_path: Path
) -> None:
    secure.grant(names)
    asyncio.run(create_input(secure, names))
    service = IngestProcess(
        secure.broker,
        names.input_topic,
        tmp_path / "ingest.log",
        extra_env=secure.env_of("dedupe-ingest"),
    )
    service.start()
    try:
        service.wait_ready()
        batch = [
            {"type": "track", "event": "Signed Up", "userId": f"u{i}", "messageId": f"m-{i}"}
            for i in range(50)
        ]
        req = urllib.request.Request(
            service.url + "/v1/batch",
            data=json.dumps({"batch": batch}).encode(),
            headers=json_headers(WRITE_KEY),
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            assert (resp.status, json.loads(resp.read())) == (200, {"success": True})
    finally:
        service.stop()
    records = asyncio.run(
        read_topic(secure.broker.bootstrap, names.input_topic, client=secure.client("admin"))
    )
    assert sorted(r.key for r in records if r.key) == sorted(f"m-{i}".encode() for i in range(50))
    assert secure.password_of("dedupe-ingest") not in service.log_text()
