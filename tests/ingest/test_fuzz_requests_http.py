"""10,000 generated requests (``tests/ingest/fuzz.py``, seeded) against the real ingest
process and the real broker: each is answered 200, with every one of its events on the input
topic, or 4xx with a JSON error naming the problem and nothing written; never 5xx, no crash,
no stall.

How to run: part of ``make test-ingest``; alone, ``DEDUPE_TEST_KAFKA_PORT=19092
.venv/bin/python -m pytest -q -s tests/ingest/test_fuzz_requests_http.py``.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import aiohttp
import pytest

from scripts.topic_admin import create_topics
from scripts.topic_reader import read_topic
from tests.ingest.fuzz import Request, Seeded, build_request
from tests.ingest.support import IngestProcess
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.integration

REQUESTS = 10_000


@pytest.mark.timeout(300)
def test_ten_thousand_generated_requests_each_accepted_whole_or_refused(
    broker: Broker, tmp_path: Path
) -> None:
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 4))
    service = IngestProcess(broker, topic, tmp_path / "ingest.log")
    service.start()
    service.wait_ready()
    answers: Counter[str] = Counter()
    given_ids: list[str] = []
    accepted_events = 0
    chooser = Seeded(20261125)
    reqs = [build_request(chooser) for _ in range(REQUESTS)]

    async def one(session: aiohttp.ClientSession, req: Request) -> None:
        nonlocal accepted_events
        async with session.post(service.url + req.path, data=req.body, headers=req.headers) as r:
            status, body = r.status, await r.json(content_type=None)
        answers[f"{status} {body.get('code', 'ok') if isinstance(body, dict) else '?'}"] += 1
        assert status == 200 or 400 <= status < 500, (status, body, req)
        assert isinstance(body, dict)
        if status != 200:
            assert body["success"] is False and body["code"] and body["error"], body
            return
        assert body == {"success": True} and req.events is not None, req
        accepted_events += len(req.events)
        given_ids.extend(e["messageId"] for e in req.events if isinstance(e.get("messageId"), str))

    async def run() -> None:
        # 8 requests in flight, as a few SDK clients would keep
        async with aiohttp.ClientSession() as session:
            for i in range(0, len(reqs), 8):
                await asyncio.gather(*(one(session, r) for r in reqs[i : i + 8]))

    started = time.monotonic()
    try:
        asyncio.run(run())
    finally:
        service.stop()
    elapsed = time.monotonic() - started
    written = asyncio.run(read_topic(broker.bootstrap, topic))
    keys = Counter(r.key for r in written)
    requests_sent = sum(answers.values())
    print(
        f"\n{requests_sent:,} requests in {elapsed:.0f}s: {answers['200 ok']:,} accepted "
        f"({accepted_events:,} events; input topic {len(written):,} records), refused by code "
        f"{dict((k, n) for k, n in answers.most_common() if k != '200 ok')}"
    )
    assert requests_sent >= REQUESTS
    assert len(written) == accepted_events
    assert all(keys[m.encode()] >= 1 for m in given_ids)
    log_text = service.log_text()
    assert "Traceback" not in log_text and "-> 5" not in log_text, log_text[-3000:]
