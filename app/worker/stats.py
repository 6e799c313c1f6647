"""The worker's live figures: what ``/stats`` answers and ``/metrics`` exports, read from the
transaction manager's tasks, the deduplicator's counts and tables, the window watch and the
standby follower at the moment they are asked."""

from __future__ import annotations

from typing import Any

import faust

from app.eos import TaskTransactionManager
from app.worker import metrics
from app.worker.dedup import Deduplicator
from app.worker.window_watch import WindowWatch


def _lag(app: faust.App, tm: TaskTransactionManager, topic: str, partition: int) -> int | None:
    """Offsets between the last processed record and the partition's end (last stable offset).

    Exact for the input topic. The repartition topic is written in transactions, so its end
    also counts commit markers: at rest it shows a small remainder, not unprocessed records.
    """
    task = tm.tasks.get(partition)
    if task is None:
        return None
    tp = faust.types.TP(topic, partition)
    high: int | None = app.consumer.highwater(tp)
    if high is None or high < 0:
        return None
    return max(high - task.positions.get(tp, high), 0)


def partition_stats(
    app: faust.App, dedup: Deduplicator, watch: WindowWatch, record_decoding: str = "aiokafka"
) -> dict[str, Any]:
    """The figures of ``/stats`` and ``/metrics``; ``record_decoding``: how fetched source
    records are decoded (``use_native_records`` in ``app/worker/factory.py``)."""
    tm: TaskTransactionManager = app.consumer.transactions
    seen = dedup.seen_ids
    partitions: dict[str, Any] = {}
    for p, task in sorted(tm.tasks.items()):
        counts: dict[str, int] = dict(dedup.counts.get(p, {}))
        partitions[str(p)] = {
            "state": task.state.value,
            **seen.status(p),
            "window_forecast": watch.forecast(p).as_dict(),
            **(dedup.producers.status(p) if dedup.producers is not None else {}),
            **{outcome: counts.get(outcome, 0) for outcome in metrics.OUTCOMES},
            "by_strategy": _by_strategy(dedup, p),
            "consumer_lag": _lag(app, tm, tm.settings.input_topic, p),
            "repartition_lag": _lag(app, tm, tm.settings.repartition_topic, p),
            "batches": task.batches,
            "commits": task.commits,
            "last_commit_at": task.last_commit_at,
            "last_commit_seconds": task.last_commit_seconds,
        }
    protocol = tm.producers.protocol
    return {
        "policy": dedup.policy(),
        "record_decoding": record_decoding,
        "transactions": protocol.stats() if protocol is not None else None,
        "partitions": partitions,
        "standbys": standby_stats(app),
    }


def standby_stats(app: faust.App) -> dict[str, Any]:
    """The standby copies this worker keeps (``recovery/follow.py``), by changelog partition:
    the changelog offset each holds and its lag (offsets behind the last stable offset)."""
    follower = getattr(app.tables.recovery, "follower", None)
    if follower is None:
        return {}
    return {
        f"{tp.topic}-{tp.partition}": {"partition": tp.partition, "offset": f.held, "lag": f.lag}
        for tp, f in sorted(follower.status().items())
    }


def _by_strategy(dedup: Deduplicator, partition: int) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (strategy, outcome), n in sorted(dedup.by_strategy.get(partition, {}).items()):
        out.setdefault(strategy, {})[outcome] = n
    return out
