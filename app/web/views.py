"""The worker's web views (Faust's web server, on DEDUPE_WEB_HOST:DEDUPE_WEB_PORT).

- ``GET /``: the status page (``app/web/status_page.py``): partitions, lag, ids held, window,
  commits, standbys, and a box to look an id up (``/?id=<messageId>`` looks it up on load).
- ``GET /health``: 200 ``{"status": "ok"}`` while the worker process runs.
- ``GET /ready``: 200 once partitions are assigned and their state recovered, else 503 (also
  during a rebalance, until the new assignment's state is recovered).
- ``GET /messages/{messageId}``: is the id held, when was it first seen, where did its one
  forwarded copy go (clean topic partition and offset), how many repeats were dropped (null
  unless DEDUPE_COUNT_REPEATS); 404 when unknown. Any worker answers: a request for an id of a
  partition another worker owns is forwarded to that worker (Faust's router).
  With ``?source=<name>`` (``DEDUPE_SCOPE=source``) the id as that source sent it.
- ``GET /producers/{name}``: a producer's highest forwarded sequence and last record time
  (producer-sequence strategy); 404 when unknown. Any worker answers, as above.
- ``GET /stats``: the dedup policy in force, the Kafka transaction protocol the producers run
  (``transactions``: ``protocol``, ``setting``, ``cluster_transaction_version``) and, per
  partition this worker owns: ids held, effective window, oldest and newest first sighting, the
  window forecast (``window_forecast``: the observed new-id rate, the window the size cap will
  leave, and a warning when that is under DEDUPE_MIN_WINDOW: ``app/worker/window_watch.py``), ids
  expired and evicted, producers held, records forwarded / dropped / dead-lettered / re-keyed /
  reusing an id by this process (also per strategy), record batches handled, consumer lag,
  commits and the last commit.
- ``GET /metrics``: the same figures for Prometheus, plus commit latency
  (``app/worker/metrics.py``).

With ``DEDUPE_WEB_TOKEN`` set, every endpoint but ``/health`` and ``/ready`` needs it
(``app/web/guard.py``).

Faust's own pages that expose table contents are turned off in ``app/worker/factory.py``. Try it
with a worker running (``make run``)::

    curl -s localhost:6066/stats | python -m json.tool
    curl -s localhost:6066/messages/<a messageId from the demo>
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import faust
from faust.exceptions import ConsumerNotStarted, SameNode
from faust.web import Request, Response, View

from app.rules import partition_for
from app.settings import Settings
from app.strategy import scoped_key
from app.web import status_page
from app.web.guard import guarded
from app.web.lookup import OutputLocator
from tables.producers import TABLE_NAME as PRODUCERS_TABLE
from tables.producers import ProducerState
from tables.seen_ids.table import TABLE_NAME
from tables.window import Entry

log = logging.getLogger(__name__)
#: Bind addresses that only this machine can reach (no warning without a token there).
LOOPBACK = ("127.0.0.1", "localhost", "::1")


def is_ready(app: faust.App) -> bool:
    """``/ready``: partitions assigned, their state recovered, no rebalance under way."""
    try:
        assigned = bool(app.consumer.assignment())
    except ConsumerNotStarted:
        # The web server starts before the consumer's thread: asked then, /ready answered
        # 500 with a traceback in the log instead of 503.
        return False
    recovery = app.tables.recovery
    # Faust never clears ``completed`` after the first recovery: during a rebalance it still
    # reads set while the new partitions' state is not recovered yet.
    return (
        assigned
        and recovery.completed.is_set()
        and not recovery.in_recovery
        and not app.rebalancing
    )


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class WorkerState:
    """What the endpoints read of the worker, handed in by the factory: the worker's room
    imports this one, never the other way."""

    #: ``/stats``'s figures (``app/worker/stats.py``)
    stats: Callable[[], dict[str, Any]]
    #: ``/metrics``'s body (Prometheus's text format)
    exposition: Callable[[], bytes]
    #: the committed entry of an id (or scoped key) in a partition, None when not held
    seen_entry: Callable[[int, bytes], Entry | None]
    #: a producer's committed state in a partition; None: the producer-sequence strategy is off
    producer: Callable[[int, bytes], ProducerState | None] | None


def register_views(app: faust.App, settings: Settings, worker: WorkerState) -> None:
    locator = OutputLocator(
        settings.bootstrap_servers, settings.output_topic, **settings.kafka_client_kwargs()
    )
    Guarded = guarded(settings.web_token)
    if not settings.web_token and settings.web_host not in LOOPBACK:
        log.warning(
            "DEDUPE_WEB_TOKEN is empty and the web server listens on %s: /, /stats, /metrics, "
            "/messages and /producers answer anyone who can reach port %d",
            settings.web_host,
            settings.web_port,
        )

    async def owner_answer(view: View, request: Request, table: str, key: bytes) -> Response | None:
        """The owner's answer for ``key`` of ``table`` when another worker owns its partition
        (Faust's router forwards the request), a 503 while the partition moves, or None: this
        worker owns it and answers itself."""
        try:
            routed: Response = await app.router.route_req(table, key, view.web, request)
            return routed
        except SameNode:
            pass
        partition = partition_for(key, settings.partitions)
        if partition not in app.consumer.transactions.tasks:
            return view.json(
                {"error": f"partition {partition} is being reassigned; retry shortly"},
                status=503,
            )
        return None

    @app.page("/")
    class StatusPage(Guarded):  # type: ignore[misc,valid-type]
        async def get(self, request: Request) -> Response:
            return self.html(status_page.PAGE)

    @app.page("/health")
    class Health(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            return self.json({"status": "ok"})

    @app.page("/ready")
    class Ready(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            ready = is_ready(app)
            body = {"ready": ready, "partitions": sorted(app.consumer.transactions.tasks)}
            return self.json(body, status=200 if ready else 503)

    @app.page("/stats")
    class Stats(Guarded):  # type: ignore[misc,valid-type]
        async def get(self, request: Request) -> Response:
            return self.json(worker.stats())

    @app.page("/metrics")
    class Metrics(Guarded):  # type: ignore[misc,valid-type]
        async def get(self, request: Request) -> Response:
            return self.bytes(worker.exposition(), content_type="text/plain; version=0.0.4")

    @app.page("/producers/{name}")
    class Producers(Guarded):  # type: ignore[misc,valid-type]
        async def get(self, request: Request, name: str) -> Response:
            key = name.encode("utf-8")
            answer = await owner_answer(self, request, PRODUCERS_TABLE, key)
            if answer is not None or worker.producer is None:
                return answer or self.json({"error": "no producer state"}, status=503)
            partition = partition_for(key, settings.partitions)
            held = worker.producer(partition, key)
            if held is None:
                return self.json({"producer": name, "partition": partition}, status=404)
            return self.json(
                {
                    "producer": name,
                    "last_sequence": held.last_sequence,
                    "last_active_ms": held.active_ms,
                    "last_active": _iso(held.active_ms),
                    "partition": partition,
                }
            )

    @app.page("/messages/{message_id}")
    class Messages(Guarded):  # type: ignore[misc,valid-type]
        async def get(self, request: Request, message_id: str) -> Response:
            id_bytes = message_id.encode("utf-8")
            source = request.query.get("source")
            answer = await owner_answer(self, request, TABLE_NAME, id_bytes)
            if answer is not None:
                return answer
            partition = partition_for(id_bytes, settings.partitions)
            state_key = id_bytes
            if source and settings.scope == "source":
                state_key = scoped_key(id_bytes, source.encode("utf-8"))
            entry = worker.seen_entry(partition, state_key)
            if entry is None:
                return self.json(
                    {"messageId": message_id, "held": False, "partition": partition}, status=404
                )
            skew = 0 if settings.time_source == "kafka" else round(settings.max_future_skew * 1e3)
            offset = await locator.locate(id_bytes, partition, entry.first_seen_ms - skew)
            return self.json(
                {
                    "messageId": message_id,
                    "held": True,
                    "first_seen_ms": entry.first_seen_ms,
                    "first_seen": _iso(entry.first_seen_ms),
                    # Counted per id only with DEDUPE_COUNT_REPEATS (null: not counted).
                    "repeats_dropped": entry.repeats if settings.count_repeats else None,
                    "partition": partition,
                    "output": {
                        "topic": settings.output_topic,
                        "partition": partition,
                        "offset": offset,
                    },
                }
            )
