"""The worker's web views (Faust's web server, on DEDUPE_WEB_HOST:DEDUPE_WEB_PORT).

- ``GET /health``: 200 ``{"status": "ok"}`` while the worker runs.
- ``GET /stats``: per partition this worker owns: ids held, effective window, oldest and newest
  first sighting, ids aged out (window) and evicted (size cap), records forwarded / dropped /
  dead-lettered / re-keyed by this process, transaction commits.

Try it with a worker running (``make run``)::

    curl -s localhost:6066/stats | python -m json.tool
"""

from __future__ import annotations

from typing import Any

import faust
from faust.web import Request, Response, View

from app.agents import Deduplicator
from app.eos import TaskTransactionManager


def partition_stats(dedup: Deduplicator, tm: TaskTransactionManager) -> dict[str, Any]:
    """The figures of ``/stats`` (a plain function, so tests and metrics can share it)."""
    seen = dedup.seen_ids
    partitions: dict[str, Any] = {}
    for p, task in sorted(tm.tasks.items()):
        counts: dict[str, int] = dict(dedup.counts.get(p, {}))
        partitions[str(p)] = {
            "state": task.state.value,
            **seen.status(p),
            "forwarded": counts.get("forwarded", 0),
            "duplicates_dropped": counts.get("duplicates_dropped", 0),
            "dead_lettered": counts.get("dead_lettered", 0),
            "rekeyed": counts.get("rekeyed", 0),
            "commits": task.commits,
            "last_commit_at": task.last_commit_at,
            "last_commit_seconds": task.last_commit_seconds,
        }
    return {"partitions": partitions}


def register_views(app: faust.App, dedup: Deduplicator) -> None:
    @app.page("/health")
    class Health(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            return self.json({"status": "ok"})

    @app.page("/stats")
    class Stats(View):  # type: ignore[misc]
        async def get(self, request: Request) -> Response:
            return self.json(partition_stats(dedup, app.consumer.transactions))
