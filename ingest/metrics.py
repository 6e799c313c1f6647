"""Prometheus metrics of the ingest service (``GET /metrics``; docs/metrics.md lists them).

One registry per process: every application a process builds counts into it (a service runs
one; tests that build several read differences). Labels stay few: ``endpoint`` is the call type
of the /v1/ paths (``batch``, ``track``...; analytics.js's one-letter paths count as the type
they stand for), ``sdk_metrics``, ``health``, ``ready``, ``metrics``, ``status_page`` (``/``), or
``unmatched``.

A labelled counter has no series until its first event, and ``increase()`` over a series that
starts at 1 sees no increase: the label values the alert rules and the dashboard read that the
code knows in advance are exported at 0 from the start (:data:`KNOWN_ANSWERS`,
:data:`KNOWN_KAFKA_ERRORS`). With them, the process metrics and ``dedupe_build_info``
(``envsettings/process_metrics.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiokafka.errors import KafkaError, KafkaTimeoutError
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

from envsettings import process_metrics
from envsettings.tokens import allowed
from ingest.events import EVENT_TYPES, kind_of_path
from ingest.status_page import PAGE

REGISTRY = CollectorRegistry()

REQUESTS = Counter(
    "dedupe_ingest_requests",
    "HTTP requests answered, by endpoint and status code",
    labelnames=["endpoint", "status"],
    registry=REGISTRY,
)
EVENTS = Counter(
    "dedupe_ingest_events",
    "Events acknowledged by Kafka (acks=all), by endpoint",
    labelnames=["endpoint"],
    registry=REGISTRY,
)
BATCH_EVENTS = Histogram(
    "dedupe_ingest_request_events",
    "Events per accepted request",
    buckets=(1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2500),
    registry=REGISTRY,
)
PRODUCE_SECONDS = Histogram(
    "dedupe_ingest_produce_seconds",
    "Time from a request's first send until Kafka acknowledged all its events",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=REGISTRY,
)
KAFKA_ERRORS = Counter(
    "dedupe_ingest_kafka_errors",
    "Requests whose sends failed, by exception class (Kafka errors and timeouts answer 503)",
    labelnames=["error"],
    registry=REGISTRY,
)

#: (endpoints, statuses) exported at 0 from the start: the answers of the /v1/ calls that carry
#: events (accepted, an internal error, Kafka did not acknowledge) and of the readiness probe,
#: the 5xx of which DedupeIngestErrors counts.
KNOWN_ANSWERS = ((("batch", *EVENT_TYPES), ("200", "500", "503")), (("ready",), ("200", "503")))
#: ``error`` labels exported at 0 from the start: the errors the service's own sink raises
#: (``ingest/sink.py``); another class of the Kafka client counts from its first.
KNOWN_KAFKA_ERRORS = (KafkaTimeoutError.__name__, KafkaError.__name__)


def _export_known_at_zero() -> None:
    for endpoints, statuses in KNOWN_ANSWERS:
        for endpoint in endpoints:
            for status in statuses:
                REQUESTS.labels(endpoint, status)
    for endpoint in KNOWN_ANSWERS[0][0]:
        EVENTS.labels(endpoint)
    for error in KNOWN_KAFKA_ERRORS:
        KAFKA_ERRORS.labels(error)


_export_known_at_zero()
process_metrics.register(REGISTRY)

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_PLAIN = {
    "/v1/m": "sdk_metrics",
    "/health": "health",
    "/ready": "ready",
    "/metrics": "metrics",
    "/": "status_page",
}


def endpoint_of(request: web.Request) -> str:
    kind = request.match_info.get("kind")
    if kind is not None:
        return kind_of_path(kind)
    return _PLAIN.get(request.path, "unmatched")


@web.middleware
async def count_requests(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Counts every answer; the outermost middleware, so errors count with their status."""
    response = await handler(request)
    REQUESTS.labels(endpoint_of(request), str(response.status)).inc()
    return response


class Sending:
    """Times one request's sends: ``with Sending(endpoint, events):`` around them."""

    def __init__(self, endpoint: str, events: int) -> None:
        self.endpoint, self.events = endpoint, events
        self.started = 0.0

    def __enter__(self) -> Sending:
        self.started = time.monotonic()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: object, tb: object) -> None:
        if kind is None:
            PRODUCE_SECONDS.observe(time.monotonic() - self.started)
            EVENTS.labels(self.endpoint).inc(self.events)
            BATCH_EVENTS.observe(self.events)
        else:
            KAFKA_ERRORS.labels(kind.__name__).inc()


def guarded(
    token: str, answer: Callable[[], web.Response]
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """A handler that answers with ``answer()`` a request carrying ``token``
    (``DEDUPE_INGEST_METRICS_TOKEN``; empty: every request), and 401 otherwise."""

    async def handler(request: web.Request) -> web.Response:
        if not allowed(token, request.headers.get("Authorization")):
            return web.json_response(
                {
                    "success": False,
                    "code": "token_required",
                    "error": "this page needs DEDUPE_INGEST_METRICS_TOKEN: send "
                    "'Authorization: Bearer <token>', or it as the password of Basic auth",
                },
                status=401,
                headers={"WWW-Authenticate": 'Basic realm="dedupe ingest metrics"'},
            )
        return answer()

    return handler


def exposition() -> web.Response:
    """GET /metrics: this process's metrics in Prometheus's text format."""
    return web.Response(
        body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def status_page() -> web.Response:
    """GET /: the status page (ingest/status_page.py), drawn from /metrics."""
    return web.Response(text=PAGE, content_type="text/html")
