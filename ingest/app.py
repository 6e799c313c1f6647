"""The HTTP ingest service: Segment's HTTP Tracking API in front of the dedup worker's input.

``create_app(settings)`` builds the aiohttp application; ``python -m ingest`` runs it (see
``ingest/__main__.py``). The service is stateless: run as many as you like behind a load
balancer; each has one shared idempotent Kafka producer.

Endpoints (all JSON):

- ``POST /v1/batch``, ``/v1/track``, ``/v1/identify``, ``/v1/page``, ``/v1/screen``,
  ``/v1/group``, ``/v1/alias`` (and analytics.js's ``/v1/b``, ``/v1/t``, ``/v1/i``, ``/v1/p``,
  ``/v1/s``, ``/v1/g``, ``/v1/a``): 200 ``{"success": true}`` once Kafka acknowledged (acks=all)
  every event of the request. Errors are ``{"success": false, "code": ..., "error": ...,
  "message": ...}`` (``message`` repeats ``error``: Segment's SDKs read ``code`` and ``message``):
  400 malformed JSON or gzip, a bad event (the message names its index), an event over 32 KB;
  401 missing or unknown write key (when ``DEDUPE_WRITE_KEYS`` is set); 413 a body over 500 KB
  after decompression; 415 neither ``application/json`` nor ``text/plain`` (browser beacons send
  JSON as text/plain), or an unsupported Content-Encoding; 503
  Kafka did not acknowledge every event in time (retry: copies are dropped downstream).
- ``POST /v1/m``: analytics.js's own usage metrics; read (at most the batch limit), dropped,
  200 ``{"success": true}``.
- ``OPTIONS`` on each of those paths: the browser's CORS preflight (``ingest/cors.py``), 204
  with the allow headers for an origin in ``DEDUPE_INGEST_CORS_ORIGINS``, 403 otherwise. Every
  answer on them to an allowed ``Origin`` carries ``Access-Control-Allow-Origin``.
- ``GET /metrics``: Prometheus metrics (``ingest/metrics.py``, docs/metrics.md); ``GET /``: a
  status page drawn from them (``ingest/status_page.py``). Both need
  ``DEDUPE_INGEST_METRICS_TOKEN`` when it is set.
- ``GET /health`` (liveness): 200 ``{"status": "ok"}`` while the process serves.
- ``GET /ready`` (readiness, for load balancers): 200 ``{"status": "ready", "topic": ...}``
  while Kafka answers the producer (a metadata request for the input topic within
  ``DEDUPE_INGEST_READY_TIMEOUT``, every partition with a leader); 503 ``{"status":
  "unavailable", "reason": ...}`` otherwise.

A request is read, decompressed, parsed and checked whole (``ingest/request.py``,
``ingest/events.py``) before its first event is sent, so a rejected request sends nothing. How
retries stay free of duplicates is explained in ``ingest/events.py`` (message ids) and
``ingest/sink.py`` (the producer).
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime

from aiohttp import hdrs, web
from aiokafka.errors import KafkaError

from ingest import metrics
from ingest.cors import RefusedOrigins, answer_headers, preflight_headers, refusal
from ingest.events import EVENT_TYPES, SHORT_PATHS, kind_of_path, prepare, received_at_text
from ingest.rejected import Limits, Rejected
from ingest.request import (
    authorize,
    basic_auth_user,
    body_write_key,
    check_content_type,
    gunzip,
    is_gzip,
    parse_json,
    raw_body_limit,
    too_large,
)
from ingest.settings import IngestSettings
from ingest.sink import EventSink, KafkaSink

log = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", IngestSettings)
LIMITS = web.AppKey("limits", Limits)
SINK = web.AppKey[EventSink]("sink")
ACKED = web.AppKey("acked", list[int])  # [requests acknowledged by Kafka], for fault tests
READY = web.AppKey("ready", list[bool])  # [what the last GET /ready found]
REFUSED = web.AppKey("refused_origins", RefusedOrigins)

#: Path of the ingest endpoints: /v1/batch and one per Segment call type, and analytics.js's
#: one-letter forms of each (/v1/b, /v1/t...).
ROUTE = "/v1/{kind:" + "|".join(("batch", *EVENT_TYPES, *SHORT_PATHS)) + "}"

#: Where analytics.js posts its own usage metrics (segmentio/analytics-next,
#: packages/browser/src/core/stats/remote-metrics.ts).
METRICS_PATH = "/v1/m"

_Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def create_app(settings: IngestSettings, *, sink: EventSink | None = None) -> web.Application:
    """The ingest application. Without ``sink`` it starts (and at cleanup stops) its own
    :class:`KafkaSink`; tests may pass another sink, which they start and stop themselves."""
    # Bodies are decompressed here (ingest/request.gunzip), bounded by the batch limit.
    app = web.Application(
        middlewares=[metrics.count_requests, json_errors],
        handler_args={"auto_decompress": False},
    )
    app[SETTINGS] = settings
    app[LIMITS] = Limits(
        max_event_bytes=settings.max_event_bytes,
        max_message_id_bytes=settings.max_message_id_bytes,
        max_batch_bytes=settings.max_batch_bytes,
        max_batch_events=settings.max_batch_events,
    )
    if sink is None:
        app.cleanup_ctx.append(_kafka_sink)
    else:
        app[SINK] = sink
    app[ACKED] = [0]
    app[READY] = [True]
    app[REFUSED] = RefusedOrigins()
    app.on_startup.append(_warn_when_open)
    app.on_response_prepare.append(_cors_headers)
    app.router.add_post(ROUTE, ingest)
    app.router.add_post(METRICS_PATH, sdk_metrics)
    app.router.add_route(hdrs.METH_OPTIONS, ROUTE, preflight)
    app.router.add_route(hdrs.METH_OPTIONS, METRICS_PATH, preflight)
    app.router.add_get("/health", health)
    app.router.add_get("/ready", ready)
    app.router.add_get("/metrics", metrics.guarded(settings.metrics_token, metrics.exposition))
    app.router.add_get("/", metrics.guarded(settings.metrics_token, metrics.status_page))
    return app


async def _kafka_sink(app: web.Application) -> AsyncIterator[None]:
    sink = KafkaSink(app[SETTINGS])
    await sink.start()
    app[SINK] = sink
    yield
    await sink.stop()


async def _warn_when_open(app: web.Application) -> None:
    if not app[SETTINGS].write_key_list:
        log.warning(
            "DEDUPE_WRITE_KEYS is empty: the ingest service accepts events from anyone "
            "(no authentication)"
        )


def error_response(status: int, code: str, message: str) -> web.Response:
    headers = {"WWW-Authenticate": 'Basic realm="dedupe-ingest"'} if status == 401 else None
    body = {"success": False, "code": code, "error": message, "message": message}
    return web.json_response(body, status=status, headers=headers)


@web.middleware
async def json_errors(request: web.Request, handler: _Handler) -> web.StreamResponse:
    """Every error is answered as JSON with a code and a sentence naming the problem."""
    try:
        return await handler(request)
    except Rejected as exc:
        level = logging.WARNING if exc.status >= 500 else logging.INFO
        log.log(
            level,
            "%s %s -> %d %s: %s",
            request.method,
            request.path,
            exc.status,
            exc.code,
            exc.message,
        )
        return error_response(exc.status, exc.code, exc.message)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
        response = error_response(
            exc.status, code, f"{exc.reason}: {request.method} {request.path}"
        )
        if hdrs.ALLOW in exc.headers:
            response.headers[hdrs.ALLOW] = exc.headers[hdrs.ALLOW]
        return response
    except Exception:
        log.exception("%s %s failed", request.method, request.path)
        return error_response(500, "internal_error", "internal error (see the service log)")


async def _read_body(request: web.Request, limit: int, too_big: Rejected) -> bytes:
    """The raw body, at most ``limit`` bytes (413 beyond it, before reading when declared)."""
    if request.content_length is not None and request.content_length > limit:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


async def ingest(request: web.Request) -> web.Response:
    """POST /v1/<kind>: check the whole request, send every event, answer once all are acked."""
    settings = request.app[SETTINGS]
    limits = request.app[LIMITS]
    accepted = settings.write_key_list
    header_key = basic_auth_user(request.headers.get(hdrs.AUTHORIZATION))
    if header_key is not None:
        authorize(header_key, accepted)  # a bad key fails before its body is read
    mimetype = request.content_type if hdrs.CONTENT_TYPE in request.headers else ""
    check_content_type(mimetype, request.charset)
    gzip = is_gzip(request.headers.get(hdrs.CONTENT_ENCODING))
    raw = await _read_body(request, raw_body_limit(limits, gzip), too_large(limits))
    body = gunzip(raw, limits) if gzip else raw
    doc = parse_json(body)
    write_key = header_key if header_key is not None else body_write_key(doc)
    authorize(write_key, accepted)
    received_at = received_at_text(datetime.now(UTC))
    source = None if write_key is None else settings.write_key_sources.get(write_key)
    records = prepare(
        kind_of_path(request.match_info["kind"]), doc, write_key, received_at, limits, source
    )
    try:
        with metrics.Sending(metrics.endpoint_of(request), len(records)):
            await request.app[SINK].send_all(records, settings.ack_timeout)
    except (KafkaError, TimeoutError) as exc:
        reason = str(exc) or type(exc).__name__
        raise Rejected(
            503,
            "kafka_unavailable",
            f"Kafka did not acknowledge every event of the request ({reason}); "
            "retry the same request: events already written are dropped as duplicates "
            "downstream",
        ) from None
    _maybe_crash(request.app)
    return web.json_response({"success": True})


def _maybe_crash(app: web.Application) -> None:
    """DEDUPE_INGEST_CRASH_AFTER_ACKS (fault tests): die between Kafka's ack and the answer,
    the moment where a client must retry events that are already written."""
    crash_after = app[SETTINGS].crash_after_acks
    if crash_after:
        app[ACKED][0] += 1
        if app[ACKED][0] == crash_after:
            log.warning("fault injection: exiting after %d acknowledged requests", crash_after)
            logging.shutdown()
            os._exit(137)


def _origin_refused(request: web.Request, origin: str) -> str:
    """The refusal's sentence, logged the first time this origin is refused."""
    env = request.app[SETTINGS].describe("cors_origins").env
    message = refusal(request.app[SETTINGS].cors_policy, origin, env)
    if request.app[REFUSED].first_time(origin):
        log.warning("%s (logged once per origin)", message)
    return message


async def _cors_headers(request: web.Request, response: web.StreamResponse) -> None:
    """Access-Control-Allow-Origin on every answer of the /v1/ paths, errors included, so that a
    page on an allowed origin can read why a request failed."""
    if not request.path.startswith("/v1/"):
        return
    origin = request.headers.get(hdrs.ORIGIN)
    for name, value in answer_headers(request.app[SETTINGS].cors_policy, origin).items():
        response.headers[name] = value
    if origin is not None and hdrs.ACCESS_CONTROL_ALLOW_ORIGIN not in response.headers:
        _origin_refused(request, origin)


async def preflight(request: web.Request) -> web.Response:
    """OPTIONS /v1/<kind>: a browser's CORS preflight (or a plain OPTIONS, answered 204)."""
    origin = request.headers.get(hdrs.ORIGIN)
    if origin is None or hdrs.ACCESS_CONTROL_REQUEST_METHOD not in request.headers:
        return web.Response(status=204, headers={hdrs.ALLOW: "POST, OPTIONS"})
    headers = preflight_headers(request.app[SETTINGS].cors_policy, origin)
    if headers is None:
        return error_response(403, "origin_not_allowed", _origin_refused(request, origin))
    return web.Response(status=204, headers=headers)


async def sdk_metrics(request: web.Request) -> web.Response:
    """POST /v1/m: analytics.js's usage metrics, read and dropped (a 404 would only make the
    SDK log an error); bounded like a batch so it cannot be used to fill the memory."""
    limits = request.app[LIMITS]
    await _read_body(request, limits.max_batch_bytes, too_large(limits))
    return web.json_response({"success": True})


async def health(request: web.Request) -> web.Response:
    """GET /health (liveness): the process is up and serving, whatever Kafka's state."""
    return web.json_response({"status": "ok"})


async def ready(request: web.Request) -> web.Response:
    """GET /ready (readiness, for load balancers): 200 while Kafka answers the producer,
    503 while it cannot be reached (requests would only wait and answer 503)."""
    settings = request.app[SETTINGS]
    reason = await request.app[SINK].unready_reason(settings.ready_timeout)
    was_ready = request.app[READY][0]
    request.app[READY][0] = reason is None
    if reason is not None:
        if was_ready:  # logged when it changes, not at every probe
            log.warning("not ready (GET /ready answers 503): %s", reason)
        return web.json_response({"status": "unavailable", "reason": reason}, status=503)
    if not was_ready:
        log.info("ready again: Kafka answers")
    return web.json_response({"status": "ready", "topic": settings.input_topic})
