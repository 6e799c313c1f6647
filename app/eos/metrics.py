"""What the exactly-once layer measures, declared here and registered by the worker in the
registry its ``/metrics`` serves (``app/worker/metrics.py``): ``app/eos`` depends on no module of
the worker, and the worker decides where the figures are exported."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

COMMIT_SECONDS = Histogram(
    "dedupe_commit_seconds",
    "Latency of a partition's transaction commit: sends acknowledged, offsets, EndTxn.",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    registry=None,
)


#: The ``reason`` labels of ``dedupe_commit_failures_total`` (``app.eos.commit.CommitResult``).
COMMIT_FAILURE_REASONS = ("unknown_outcome", "error")
COMMIT_FAILURES = Counter(
    "dedupe_commit_failures",
    "Transactions that did not commit and whose partition is re-read, by reason: "
    "unknown_outcome (the commit's answer was lost and it had not committed), error (any "
    "other failure).",
    labelnames=["partition", "reason"],
    registry=None,
)
BELOW_MIN_INSYNC = Gauge(
    "dedupe_partitions_below_min_insync",
    "Partitions of the worker's topics and of __transaction_state and __consumer_offsets with "
    "fewer replicas in sync than their min.insync.replicas, as the brokers last said (every "
    "10 s): above 0, writes and transactions wait for brokers to return (app/eos/replicas.py).",
    labelnames=["topic"],
    registry=None,
)
