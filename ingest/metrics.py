"""Prometheus metrics of the ingest service (``GET /metrics``; docs/metrics.md lists them).

One registry per process: every application a process builds counts into it (a service runs
one; tests that build several read differences). Labels stay few: ``endpoint`` is the call type
of the /v1/ paths (``batch``, ``track``...; analytics.js's one-letter paths count as the type
they stand for), ``sdk_metrics``, ``health``, ``ready``, ``metrics``, ``status_page`` (``/``), or
``unmatched``.

A labelled counter has no series until its first event, and ``increase()`` over a series that
starts at 1 sees no increase: the label values the alert rules and the dashboard read that the
code knows in advance are exported at 0 from the start (:data:`KNOWN_ANSWERS`,
:data:`KAFKA_ERROR_KINDS`). With them, the process metrics and ``dedupe_build_info``
(``envsettings/process_metrics.py``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiokafka import errors
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
    "Requests whose sends failed, by kind of error: timeout, retriable, authorization, "
    "record_too_large or other (Kafka errors and timeouts answer 503; the log names the class)",
    labelnames=["error"],
    registry=REGISTRY,
)

#: (endpoints, statuses) exported at 0 from the start: the answers of the /v1/ calls that carry
#: events (accepted, an internal error, Kafka did not acknowledge) and of the readiness probe,
#: the 5xx of which DedupeIngestErrors counts.
KNOWN_ANSWERS = ((("batch", *EVENT_TYPES), ("200", "500", "503")), (("ready",), ("200", "503")))
#: The ``error`` labels of :data:`KAFKA_ERRORS`, every one exported at 0 from the start. A kind
#: rather than the exception's class: the sink raises a failed send's own error, which can be any
#: of the Kafka client's many classes, and a class first seen in production would start a series
#: at 1, whose first failure ``increase()`` misses. :func:`kafka_error_kind` says which is which.
KAFKA_ERROR_KINDS = ("timeout", "retriable", "authorization", "record_too_large", "other")
#: No acknowledgement in time: the service's own deadline (the sink raises KafkaTimeoutError;
#: TimeoutError is asyncio's) or the broker's, waiting for the replicas (acks=all).
_TIMEOUT = (TimeoutError, errors.KafkaTimeoutError, errors.RequestTimedOutError)
#: Kafka refuses the service's user: an ACL denies it, or its credentials no longer pass.
_AUTHORIZATION = (
    errors.TopicAuthorizationFailedError,
    errors.ClusterAuthorizationFailedError,
    errors.TransactionalIdAuthorizationFailed,
    errors.GroupAuthorizationFailedError,
    errors.DelegationTokenAuthorizationFailed,
    errors.AuthenticationFailedError,
    errors.SaslAuthenticationFailed,
)
#: A record or a batch over a limit (the producer's max_request_size, the topic's
#: max.message.bytes): a retry of the same request fails again.
_TOO_LARGE = (
    errors.RecordTooLargeError,
    errors.MessageSizeTooLargeError,
    errors.RecordListTooLargeError,
)


def kafka_error_kind(kind: type[BaseException]) -> str:
    """The label of :data:`KAFKA_ERRORS` a failed send of this exception class counts under:
    one of :data:`KAFKA_ERROR_KINDS`. ``retriable`` is any other error the Kafka client marks
    as passing (no leader, too few replicas in sync, a lost connection); ``other`` is the rest
    (the producer not started, a sequence error of the idempotent producer, an error that is
    not Kafka's). Every class has its kind, one a later release of the client adds included."""
    if issubclass(kind, _TIMEOUT):
        return "timeout"
    if issubclass(kind, _AUTHORIZATION):
        return "authorization"
    if issubclass(kind, _TOO_LARGE):
        return "record_too_large"
    if issubclass(kind, errors.KafkaError) and getattr(kind, "retriable", False):
        return "retriable"
    return "other"


def _export_known_at_zero() -> None:
    for endpoints, statuses in KNOWN_ANSWERS:
        for endpoint in endpoints:
            for status in statuses:
                REQUESTS.labels(endpoint, status)
    for endpoint in KNOWN_ANSWERS[0][0]:
        EVENTS.labels(endpoint)
    for error in KAFKA_ERROR_KINDS:
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
            # The class itself is in the 503's log line (ingest/app.py logs the error).
            KAFKA_ERRORS.labels(kafka_error_kind(kind)).inc()


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
