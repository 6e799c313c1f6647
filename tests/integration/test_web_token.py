"""``DEDUPE_WEB_TOKEN`` on real workers: each operator endpoint refuses a request without the
token (401 with a Basic challenge, so a browser asks for it) and one with a wrong token, and
answers one that carries it as a Bearer token or as the Basic password; ``/health`` and
``/ready`` answer without it; a lookup of an id the other worker owns, sent with the token, is
forwarded (with the request's headers) and answered by the owner."""

from __future__ import annotations

import asyncio
import base64
import json
import urllib.error
import urllib.request

from app.rules import partition_for
from scripts.streams import build_stream, produce
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

TOKEN = "s3cret-token"
BEARER = {"Authorization": f"Bearer {TOKEN}"}
BASIC = {"Authorization": "Basic " + base64.b64encode(f"ops:{TOKEN}".encode()).decode()}


def status(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def test_the_token_guards_every_operator_endpoint_and_travels_with_a_forwarded_lookup(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i, extra_env={"DEDUPE_WEB_TOKEN": TOKEN})
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready()
    stream = build_stream(500, 0.1, seed=9)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, 120, workers)

    base = f"http://127.0.0.1:{workers[0].web_port}"
    code, _ = status(f"{base}/stats", BEARER)
    assert code == 200
    request = urllib.request.Request(f"{base}/stats", headers=BEARER)
    with urllib.request.urlopen(request, timeout=10) as r:
        mine = set(json.load(r)["partitions"])
    elsewhere = next(
        r.message_id
        for r in stream.records
        if str(partition_for(r.message_id.encode(), workers[0].partitions)) not in mine
    )
    # With the token: what each answers without a guard (no producer-sequence state: 503).
    answers = {"/": 200, "/stats": 200, "/metrics": 200, f"/messages/{elsewhere}": 200}
    answers["/producers/p1"] = status(f"{base}/producers/p1", BEARER)[0]
    assert answers["/producers/p1"] in (404, 503)
    for path, answer in answers.items():
        code, headers = status(base + path)
        assert code == 401, path
        assert headers["WWW-Authenticate"].startswith("Basic"), path
        assert status(base + path, {"Authorization": "Bearer wrong"})[0] == 401, path
        assert status(base + path, BEARER)[0] == answer, path
        assert status(base + path, BASIC)[0] == answer, path
    for path in ("/health", "/ready"):
        assert status(base + path)[0] == 200, path
    # The lookup of an id the other worker owns was forwarded with the token (200 above).
    assert status(f"{base}/messages/{stream.records[0].message_id}", BASIC)[0] == 200
