"""CORS against the real ingest process and the real broker: the preflights and POSTs a browser
sends for analytics.js from a page on another origin (``Origin``, ``Authorization: Basic``,
``Content-Type: text/plain``, ``X-Retry-Count``), with every origin allowed (the default), a
list of origins, and none. ``test_cors.py`` tests the rules themselves."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.app import ROUTE
from scripts.topic_admin import create_topics
from tests.ingest.cases import sdk_event
from tests.ingest.support import WRITE_KEY, IngestProcess, basic, records_in
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.integration

#: Fixed test ports of this module's three ingest processes.
PORTS = {"any": 19502, "listed": 19503, "none": 19504}  # 19501: the broker's controller
PAGE = "http://127.0.0.1:19510"  # the page's origin: another port is another origin
OTHER = "https://evil.example"
#: Every path a browser may preflight: the tracking paths (long and short forms) and /v1/m.
PATHS = ["/v1/" + kind for kind in ROUTE.split(":", 1)[1].rstrip("}").split("|")] + ["/v1/m"]

Answer = tuple[int, dict[str, str], Any]


def call(url: str, method: str, headers: dict[str, str], body: bytes | None = None) -> Answer:
    req = urllib.request.Request(url, data=body, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, dict(resp.headers), json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, dict(err.headers), json.loads(raw) if raw else None


def preflight(url: str, origin: str, headers: str = "authorization,content-type") -> Answer:
    """What Chromium sends before analytics.js's POST."""
    return call(
        url,
        "OPTIONS",
        {
            "Origin": origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": headers,
        },
    )


def sdk_post(url: str, origin: str, doc: Any, key: str = WRITE_KEY, retry: int = 0) -> Answer:
    """A POST as analytics.js sends it (fetch-dispatcher.ts / batched-dispatcher.ts)."""
    headers = {"Origin": origin, "Content-Type": "text/plain", "Authorization": basic(key)}
    if retry:
        headers["X-Retry-Count"] = str(retry)
    return call(url, "POST", headers, json.dumps(doc).encode())


def allowed_headers(headers: dict[str, str]) -> set[str]:
    return {h.strip().lower() for h in headers["Access-Control-Allow-Headers"].split(",")}


@pytest.fixture(scope="module")
def services(
    broker: Broker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, IngestProcess]]:
    """Three ingest processes on one topic: DEDUPE_INGEST_CORS_ORIGINS unset (any origin), a
    list naming the page's origin, and none."""
    topic = f"in-{unique_suffix()}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 4))
    logs = Path(tmp_path_factory.mktemp("ingest"))
    origins = {"listed": {"DEDUPE_INGEST_CORS_ORIGINS": f"https://shop.example,{PAGE}"}}
    origins["none"] = {"DEDUPE_INGEST_CORS_ORIGINS": "none"}
    procs = {
        name: IngestProcess(
            broker, topic, logs / f"{name}.log", port=port, extra_env=origins.get(name, {})
        )
        for name, port in PORTS.items()
    }
    for proc in procs.values():
        proc.start()
    try:
        for proc in procs.values():
            proc.wait_ready()
        yield procs
    finally:
        for proc in procs.values():
            proc.stop()


def test_every_path_answers_the_preflight_of_analytics_js(
    services: dict[str, IngestProcess],
) -> None:
    url = services["any"].url
    for path in PATHS:
        status, headers, body = preflight(url + path, PAGE)
        assert (status, body) == (204, None), path
        assert headers["Access-Control-Allow-Origin"] == "*", path
        assert headers["Access-Control-Allow-Methods"] == "POST"
        assert {"authorization", "content-type", "x-retry-count"} <= allowed_headers(headers)
        assert int(headers["Access-Control-Max-Age"]) >= 600
        assert headers["Vary"] == "Origin"
        assert "Access-Control-Allow-Credentials" not in headers


def test_a_preflight_grants_only_the_allowed_headers_it_is_asked_for(
    services: dict[str, IngestProcess],
) -> None:
    url = services["any"].url + "/v1/t"
    status, headers, _ = preflight(url, PAGE, "authorization,content-type,x-retry-count,x-evil")
    assert status == 204
    granted = allowed_headers(headers)
    assert {"authorization", "content-type", "x-retry-count"} <= granted
    assert "x-evil" not in granted and "*" not in granted


def test_cross_origin_posts_land_and_every_answer_is_readable(
    broker: Broker, services: dict[str, IngestProcess]
) -> None:
    url = services["any"].url
    before = records_in(broker, services["any"].topic)
    track = {**sdk_event(1), "writeKey": WRITE_KEY}
    status, headers, body = sdk_post(url + "/v1/t", PAGE, track)
    assert (status, body) == (200, {"success": True})
    assert headers["Access-Control-Allow-Origin"] == "*" and headers["Vary"] == "Origin"
    batch = {"batch": [sdk_event(i) for i in range(2, 7)], "writeKey": WRITE_KEY}
    status, headers, body = sdk_post(url + "/v1/b", PAGE, batch, retry=1)
    assert (status, body, headers["Access-Control-Allow-Origin"]) == (200, {"success": True}, "*")
    assert records_in(broker, services["any"].topic) - before == 6
    # Errors carry it too, so the page can read why a request failed.
    for answer, expected in [
        (sdk_post(url + "/v1/t", PAGE, {"userId": "u1", "writeKey": WRITE_KEY}), 400),
        (sdk_post(url + "/v1/t", PAGE, track, key="wrong-key"), 401),
        (call(url + "/v1/nope", "POST", {"Origin": PAGE}, b"{}"), 404),
    ]:
        status, headers, body = answer
        assert status == expected and body["success"] is False, body
        assert headers["Access-Control-Allow-Origin"] == "*", status
    # A server or curl sends no Origin: no CORS header.
    plain = {"Content-Type": "application/json", "Authorization": basic(WRITE_KEY)}
    status, headers, _ = call(url + "/v1/t", "POST", plain, json.dumps(sdk_event(8)).encode())
    assert status == 200 and "Access-Control-Allow-Origin" not in headers
    assert records_in(broker, services["any"].topic) - before == 7


def test_the_sdk_metrics_are_accepted_and_dropped(
    broker: Broker, services: dict[str, IngestProcess]
) -> None:
    """analytics.js posts its usage metrics to /v1/m as text/plain (remote-metrics.ts)."""
    before = records_in(broker, services["any"].topic)
    metric = {"type": "Counter", "metric": "analytics_js.invoke", "value": 1, "tags": {}}
    headers = {"Origin": PAGE, "Content-Type": "text/plain"}
    status, answer, body = call(
        services["any"].url + "/v1/m", "POST", headers, json.dumps({"series": [metric]}).encode()
    )
    assert (status, body, answer["Access-Control-Allow-Origin"]) == (200, {"success": True}, "*")
    assert records_in(broker, services["any"].topic) == before


def test_listed_origins_are_echoed_and_others_refused_and_logged_once(
    services: dict[str, IngestProcess],
) -> None:
    service = services["listed"]
    status, headers, _ = preflight(service.url + "/v1/t", PAGE)
    assert (status, headers["Access-Control-Allow-Origin"]) == (204, PAGE)
    assert headers["Vary"] == "Origin"
    status, headers, body = sdk_post(service.url + "/v1/t", PAGE, {**sdk_event(9)})
    assert (status, headers["Access-Control-Allow-Origin"]) == (200, PAGE), body
    for _ in range(3):
        status, headers, body = preflight(service.url + "/v1/t", OTHER)
        assert (status, body["code"]) == (403, "origin_not_allowed")
        assert body["error"] == f"origin '{OTHER}' is not in DEDUPE_INGEST_CORS_ORIGINS"
        assert not any(name.startswith("Access-Control-") for name in headers), headers
        assert headers["Vary"] == "Origin"
        # A refused origin's POST gets no header: the browser hides the answer from the page.
        status, headers, _ = sdk_post(service.url + "/v1/t", OTHER, sdk_event(10))
        assert "Access-Control-Allow-Origin" not in headers
    assert service.log_text().count(f"origin '{OTHER}' is not in") == 1, service.log_text()


def test_no_origin_is_allowed_when_the_setting_is_none(
    services: dict[str, IngestProcess],
) -> None:
    status, headers, body = preflight(services["none"].url + "/v1/b", PAGE)
    assert (status, body["code"]) == (403, "origin_not_allowed")
    assert "(DEDUPE_INGEST_CORS_ORIGINS=none)" in body["error"]
    assert "Access-Control-Allow-Origin" not in headers
