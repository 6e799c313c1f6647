"""The ingest app over real HTTP, in-process, with a recording sink instead of Kafka: statuses,
JSON errors, what is sent and what is not. (``test_http_kafka.py`` repeats the bad requests
against the real broker.)"""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import AsyncIterator

import pytest
from aiokafka.errors import KafkaConnectionError

from app import rules
from tests.ingest.cases import BAD_REQUESTS, BadRequest, sdk_event
from tests.ingest.recording import RecordingSink, post, serve
from tests.ingest.support import WRITE_KEY, basic, json_headers


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=[c.name for c in BAD_REQUESTS])
async def test_bad_requests_get_their_status_and_a_json_error_and_send_nothing(
    case: BadRequest,
) -> None:
    sink = RecordingSink()
    async with serve(sink) as client:
        resp = await client.request(case.method, case.path, data=case.body, headers=case.headers)
        body = await resp.json()
    assert resp.status == case.status, body
    assert resp.content_type == "application/json"
    assert body["success"] is False and body["code"] == case.code
    assert case.fragment in body["error"] and body["message"] == body["error"]
    assert sink.requests == []
    if case.status == 401:
        assert resp.headers["WWW-Authenticate"].startswith("Basic")


async def test_a_batch_is_sent_keyed_by_message_id_with_received_at() -> None:
    sink = RecordingSink()
    events = [sdk_event(i) for i in range(5)]
    async with serve(sink) as client:
        status, body = await post(client, "/v1/batch", {"batch": events, "sentAt": "now"})
    assert (status, body) == (200, {"success": True})
    [records] = sink.requests
    assert [r.message_id for r in records] == [e["messageId"] for e in events]
    for record, event in zip(records, events, strict=True):
        assert record.key == event["messageId"].encode()
        doc = json.loads(record.value)
        assert doc == {**event, "sentAt": "now", "receivedAt": doc["receivedAt"]}
        assert doc["receivedAt"].endswith("Z")
        assert isinstance(
            rules.inspect(record.value, max_event_bytes=32768, max_id_bytes=256), rules.Valid
        )


@pytest.mark.parametrize("kind", ["track", "identify", "page", "screen", "group", "alias"])
async def test_single_event_endpoints(kind: str) -> None:
    sink = RecordingSink()
    event = {"userId": "u1", "event": "e", "groupId": "g", "previousId": "p", "name": "Home"}
    async with serve(sink) as client:
        status, body = await post(client, f"/v1/{kind}", {**event, "writeKey": "x"})
    assert (status, body) == (200, {"success": True})
    [value] = sink.values
    assert value["type"] == kind and "writeKey" not in value and value["messageId"]


async def test_gzip_bodies_are_accepted() -> None:
    sink = RecordingSink()
    raw = gzip.compress(json.dumps({"batch": [sdk_event(1), sdk_event(2)]}).encode())
    async with serve(sink) as client:
        resp = await client.post(
            "/v1/batch", data=raw, headers=json_headers(**{"Content-Encoding": "gzip"})
        )
        assert resp.status == 200, await resp.text()
    assert len(sink.values) == 2


async def test_chunked_bodies_over_the_limit_are_413() -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"batch": ['
        for _ in range(60):
            yield b'"' + b"x" * 10_000 + b'",'
        yield b"1]}"

    sink = RecordingSink()
    async with serve(sink) as client:
        resp = await client.post("/v1/batch", data=chunks(), headers=json_headers())
        body = await resp.json()
    assert resp.status == 413 and body["code"] == "request_too_large"
    assert sink.requests == []


async def test_write_key_in_the_body_is_accepted_and_not_produced() -> None:
    sink = RecordingSink()
    async with serve(sink) as client:
        status, _ = await post(
            client, "/v1/batch", {"writeKey": WRITE_KEY, "batch": [sdk_event(1)]}, key=None
        )
        track_status, _ = await post(
            client, "/v1/track", {"writeKey": WRITE_KEY, "userId": "u", "event": "e"}, key=None
        )
    assert (status, track_status) == (200, 200)
    assert all("writeKey" not in v for v in sink.values)


#: analytics.js posts each call to /v1/<first letter of its type> and batches to /v1/b.
SHORT_PATHS = {
    "t": "track",
    "i": "identify",
    "p": "page",
    "s": "screen",
    "g": "group",
    "a": "alias",
}


@pytest.mark.parametrize("content_type", ["text/plain;charset=UTF-8", "text/plain"])
@pytest.mark.parametrize("path", ["/v1/track", "/v1/t"])
async def test_browser_beacons_text_plain_json_with_the_key_in_the_body(
    path: str, content_type: str
) -> None:
    """navigator.sendBeacon sends JSON as text/plain and cannot set an Authorization header."""
    sink = RecordingSink()
    event = {"writeKey": WRITE_KEY, "userId": "u1", "event": "Clicked", "messageId": "ajs-1"}
    async with serve(sink) as client:
        resp = await client.post(
            path, data=json.dumps(event).encode(), headers={"Content-Type": content_type}
        )
        assert (resp.status, await resp.json()) == (200, {"success": True})
    [record] = sink.requests[0]
    assert record.key == b"ajs-1"
    value = json.loads(record.value)
    assert value["type"] == "track" and value["event"] == "Clicked"
    assert "writeKey" not in value


@pytest.mark.parametrize(("short", "kind"), SHORT_PATHS.items())
async def test_analytics_js_short_paths(short: str, kind: str) -> None:
    sink = RecordingSink()
    event = {"userId": "u1", "event": "e", "groupId": "g", "previousId": "p", "name": "Home"}
    async with serve(sink) as client:
        resp = await client.post(
            f"/v1/{short}",
            data=json.dumps({**event, "writeKey": WRITE_KEY}).encode(),
            headers={"Content-Type": "text/plain"},
        )
        assert resp.status == 200, await resp.text()
    [value] = sink.values
    assert value["type"] == kind and "writeKey" not in value


async def test_an_analytics_js_batch_beacon_at_v1_b() -> None:
    sink = RecordingSink()
    events = [sdk_event(i) for i in range(3)]
    body = {"writeKey": WRITE_KEY, "batch": events, "sentAt": "2030-01-01T00:00:01.000Z"}
    async with serve(sink) as client:
        resp = await client.post(
            "/v1/b", data=json.dumps(body).encode(), headers={"Content-Type": "text/plain"}
        )
        assert resp.status == 200, await resp.text()
    assert [v["messageId"] for v in sink.values] == [e["messageId"] for e in events]


async def test_the_header_key_wins_over_the_body_key() -> None:
    sink = RecordingSink()
    async with serve(sink) as client:
        resp = await client.post(
            "/v1/batch",
            data=json.dumps({"writeKey": WRITE_KEY, "batch": [sdk_event(1)]}),
            headers={"Content-Type": "application/json", "Authorization": basic("wrong")},
        )
    assert resp.status == 401 and sink.requests == []


async def test_one_of_several_keys() -> None:
    sink = RecordingSink()
    async with serve(sink, write_keys="a,b,c") as client:
        statuses = [
            (await post(client, "/v1/batch", {"batch": [sdk_event(i)]}, key=k))[0]
            for i, k in enumerate(("a", "b", "c", "d"))
        ]
    assert statuses == [200, 200, 200, 401]


async def test_without_write_keys_the_service_is_open_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = RecordingSink()
    with caplog.at_level("WARNING", logger="ingest.app"):
        async with serve(sink, write_keys="") as client:
            assert (await post(client, "/v1/batch", {"batch": [sdk_event(1)]}, key=None))[0] == 200
            assert (await post(client, "/v1/batch", {"batch": [sdk_event(2)]}, key="any"))[0] == 200
    assert "DEDUPE_WRITE_KEYS is empty" in caplog.text


@pytest.mark.parametrize(
    "error", [KafkaConnectionError("broker gone"), TimeoutError()], ids=["kafka", "timeout"]
)
async def test_kafka_errors_are_503_asking_for_a_retry(error: BaseException) -> None:
    async with serve(RecordingSink(error)) as client:
        status, body = await post(client, "/v1/batch", {"batch": [sdk_event(1)]})
    assert status == 503 and body["code"] == "kafka_unavailable"
    assert "retry the same request" in body["error"]


async def test_a_retried_body_without_message_ids_gets_the_same_ids() -> None:
    sink = RecordingSink()
    events = [{"type": "track", "event": "Clicked", "userId": f"u{i}"} for i in range(3)]
    async with serve(sink) as client:
        for sent_at in ("t1", "t2"):
            await post(client, "/v1/batch", {"batch": events, "sentAt": sent_at})
            await asyncio.sleep(0.002)  # a later receivedAt
    first, retry = sink.requests
    assert [r.key for r in first] == [r.key for r in retry]
    assert len({r.key for r in first}) == 3
    assert first[0].value != retry[0].value  # receivedAt and sentAt differ, the id does not


async def test_health() -> None:
    async with serve(RecordingSink()) as client:
        resp = await client.get("/health")
        assert (resp.status, await resp.json()) == (200, {"status": "ok"})


async def test_ready_asks_the_sink_with_the_ready_timeout() -> None:
    sink = RecordingSink()
    async with serve(sink) as client:
        resp = await client.get("/ready")
        assert (resp.status, await resp.json()) == (200, {"status": "ready", "topic": "events"})
    assert sink.ready_timeouts == [1.0]


async def test_not_ready_is_503_with_the_reason_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink = RecordingSink(unready="no broker of localhost:9092 answered a metadata request")
    with caplog.at_level("INFO", logger="ingest.app"):
        async with serve(sink) as client:
            for _ in range(3):
                resp = await client.get("/ready")
                body = await resp.json()
                assert resp.status == 503
                assert body == {"status": "unavailable", "reason": sink.unready}
            assert (await client.get("/health")).status == 200  # alive all the same
            sink.unready = None
            assert (await client.get("/ready")).status == 200
    assert caplog.text.count("not ready (GET /ready answers 503): no broker of") == 1
    assert caplog.text.count("ready again") == 1


async def test_sdk_metrics_are_read_and_dropped_within_the_batch_limit() -> None:
    """POST /v1/m (analytics.js's usage metrics, text/plain, no write key): 200, nothing sent;
    a body over the batch limit is 413 like any other."""
    sink = RecordingSink()
    async with serve(sink) as client:
        metric = {"series": [{"type": "Counter", "metric": "analytics_js.invoke", "value": 1}]}
        resp = await client.post(
            "/v1/m", data=json.dumps(metric), headers={"Content-Type": "text/plain"}
        )
        assert (resp.status, await resp.json()) == (200, {"success": True})
        resp = await client.post("/v1/m", data=b"x" * (500 * 1024 + 1))
        assert (resp.status, (await resp.json())["code"]) == (413, "request_too_large")
    assert sink.requests == []
