"""The ingest service's ``GET /metrics`` (ingest/metrics.py) over real HTTP, in-process: every
answer counted with its endpoint and status, events and produce time of accepted requests,
Kafka errors by kind. The registry is the process's, so each check reads a difference."""

from __future__ import annotations

import json

import pytest
from aiohttp.test_utils import TestClient, TestServer
from aiokafka.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    NotEnoughReplicasError,
    TopicAuthorizationFailedError,
)
from prometheus_client.parser import text_string_to_metric_families

from ingest.app import create_app
from ingest.settings import IngestSettings
from tests.ingest.cases import sdk_event
from tests.ingest.recording import RecordingSink, serve
from tests.ingest.support import WRITE_KEY, json_headers

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


async def scrape(client: object) -> Samples:
    resp = await client.get("/metrics")  # type: ignore[attr-defined]
    assert resp.status == 200
    assert resp.content_type == "text/plain"
    text = await resp.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def delta(after: Samples, before: Samples, name: str, **labels: str) -> float:
    key = (name, tuple(sorted(labels.items())))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def test_answers_events_and_produce_time_are_counted() -> None:
    sink = RecordingSink()
    async with serve(sink) as client:
        before = await scrape(client)
        batch = {"batch": [sdk_event(i) for i in range(5)]}
        headers = json_headers()
        assert (
            await client.post("/v1/batch", data=json.dumps(batch), headers=headers)
        ).status == 200
        track = json.dumps(sdk_event(9))
        assert (await client.post("/v1/t", data=track, headers=headers)).status == 200
        assert (await client.post("/v1/batch", data=b"{", headers=headers)).status == 400
        assert (await client.get("/nowhere")).status == 404
        after = await scrape(client)
    assert delta(after, before, "dedupe_ingest_requests_total", endpoint="batch", status="200") == 1
    assert delta(after, before, "dedupe_ingest_requests_total", endpoint="track", status="200") == 1
    assert delta(after, before, "dedupe_ingest_requests_total", endpoint="batch", status="400") == 1
    assert (
        delta(after, before, "dedupe_ingest_requests_total", endpoint="unmatched", status="404")
        == 1
    )
    assert delta(after, before, "dedupe_ingest_events_total", endpoint="batch") == 5
    assert delta(after, before, "dedupe_ingest_events_total", endpoint="track") == 1
    assert delta(after, before, "dedupe_ingest_request_events_count") == 2
    assert delta(after, before, "dedupe_ingest_request_events_sum") == 6
    assert delta(after, before, "dedupe_ingest_produce_seconds_count") == 2


@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (KafkaConnectionError("no broker"), "retriable"),
        (NotEnoughReplicasError(), "retriable"),
        (TopicAuthorizationFailedError(), "authorization"),
        (KafkaTimeoutError("1 of 1 events not acknowledged within 2s"), "timeout"),
    ],
)
async def test_a_kafka_error_is_counted_by_kind_with_its_503_and_logged_by_class(
    error: Exception, kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On the kind's series, there at 0 before the first error; the log names the class."""
    sink = RecordingSink(error=error)
    async with serve(sink) as client:
        before = await scrape(client)
        headers = json_headers()
        body = json.dumps({"batch": [sdk_event(1)]})
        with caplog.at_level("WARNING", logger="ingest.app"):
            assert (await client.post("/v1/batch", data=body, headers=headers)).status == 503
        after = await scrape(client)
    errors = "dedupe_ingest_kafka_errors_total"
    assert (errors, (("error", kind),)) in before
    assert delta(after, before, errors, error=kind) == 1
    assert {k for k in after if k[0] == errors} == {k for k in before if k[0] == errors}
    assert type(error).__name__ in caplog.text
    assert delta(after, before, "dedupe_ingest_requests_total", endpoint="batch", status="503") == 1
    assert delta(after, before, "dedupe_ingest_events_total", endpoint="batch") == 0


async def test_metrics_need_the_token_when_one_is_set() -> None:
    settings = IngestSettings(write_keys=WRITE_KEY, metrics_token="m3trics")
    app = create_app(settings, sink=RecordingSink())
    async with TestClient(TestServer(app)) as client:
        refused = await client.get("/metrics")
        assert refused.status == 401
        assert refused.headers["WWW-Authenticate"].startswith("Basic")
        assert (await refused.json())["code"] == "token_required"
        wrong = await client.get("/metrics", headers={"Authorization": "Bearer nope"})
        assert wrong.status == 401
        ok = await client.get("/metrics", headers={"Authorization": "Bearer m3trics"})
        assert ok.status == 200 and "dedupe_ingest_requests_total" in await ok.text()
        assert (await client.get("/health")).status == 200  # probes stay open
