"""Property-based test (Hypothesis) of the ingest service's request handling, in-process over
real HTTP with a recording sink: every generated request is answered 200 with each of its
events sent once (keyed by a messageId, an event the worker accepts as valid), or 4xx with a
JSON error naming the problem and nothing sent; never 5xx, never a crash.

How to run: ``.venv/bin/python -m pytest -q tests/ingest/test_fuzz_requests.py`` (part of
``make test-ingest``; no broker needed).
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from typing import Any

from aiohttp.test_utils import TestClient, TestServer
from hypothesis import HealthCheck, given, settings

from app import rules
from app.settings import Settings
from ingest.app import create_app
from ingest.settings import IngestSettings
from tests.ingest.fuzz import Request, requests
from tests.ingest.recording import RecordingSink
from tests.ingest.support import WRITE_KEY

WORKER = Settings.from_env({})


def check_answer(req: Request, status: int, body: Any, sent: list[Any]) -> None:
    """The contract for one request: ``sent`` are the records the request produced."""
    assert status == 200 or 400 <= status < 500, (status, body)
    assert isinstance(body, dict)
    if status != 200:
        assert body["success"] is False and body["code"] and body["error"], body
        assert sent == []
        return
    assert body == {"success": True}
    assert req.events is not None and len(sent) == len(req.events)
    for original, record in zip(req.events, sent, strict=True):
        doc = json.loads(record.value)
        assert record.key == record.message_id.encode("utf-8") == doc["messageId"].encode()
        assert "writeKey" not in doc and "receivedAt" in doc
        if isinstance(original.get("messageId"), str):
            assert doc["messageId"] == original["messageId"]
        # what the service accepts, the worker must not dead-letter
        verdict = rules.inspect(
            record.value,
            max_event_bytes=WORKER.max_event_bytes,
            max_id_bytes=WORKER.max_message_id_bytes,
        )
        assert isinstance(verdict, rules.Valid) and verdict.id_bytes == record.key, verdict


def test_every_request_is_accepted_whole_or_refused_with_a_reason() -> None:
    loop = asyncio.new_event_loop()
    sink = RecordingSink()
    settings_ = IngestSettings(write_keys=WRITE_KEY, ack_timeout=2.0)
    client = TestClient(TestServer(create_app(settings_, sink=sink)), loop=loop)
    loop.run_until_complete(client.start_server())

    async def send(req: Request) -> tuple[int, Any]:
        resp = await client.post(req.path, data=req.body, headers=req.headers)
        return resp.status, await resp.json()

    @settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(req=requests())
    def one(req: Request) -> None:
        before = len(sink.requests)
        status, body = loop.run_until_complete(send(req))
        sent = [r for batch in sink.requests[before:] for r in batch]
        answers[f"{status} {body.get('code', 'ok') if isinstance(body, dict) else '?'}"] += 1
        check_answer(req, status, body, sent)

    answers: Counter[str] = Counter()
    try:
        one()
        print(f"\n{sum(answers.values())} requests: {dict(answers.most_common())}")
        assert answers["200 ok"] > 50 and len(answers) > 10, answers
    finally:
        loop.run_until_complete(client.close())
        loop.close()
