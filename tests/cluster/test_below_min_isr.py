"""Two of three brokers down: fewer replicas in sync than ``min.insync.replicas`` (2), so no
write with ``acks=all`` and no transaction can complete. The workers must stall (not crash,
not skip, not commit anything partial), say why in one clear log line and a metric, and resume
by themselves when one broker returns; nothing is lost.

How to run: part of ``make test-cluster``.
"""

from __future__ import annotations

import signal
import time

import pytest

from scripts.kafka_cluster import Cluster
from tests.cluster.support import hanging
from tests.cluster.test_broker_faults import CLUSTER_ENV
from tests.faults.conftest import SCALE
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import Broker, Names, Worker, get

pytestmark = pytest.mark.faults

#: Longer than the workers' DEDUPE_COMMIT_TIMEOUT (30 s): a commit that cannot complete is
#: given up, and its cause named, after that long.
STALL_SECONDS = 45.0
#: The worker's log line while the cluster refuses its writes (app/eos/commit.py).
STALL_LINE = "fewer replicas in sync than min.insync.replicas"


def stall_metric(worker: Worker) -> float:
    """The worker's ``dedupe_commit_failures_total{reason="not_enough_replicas"}``, summed."""
    status, body = get(worker, "/metrics")
    assert status == 200, body
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in str(body).splitlines()
        if line.startswith("dedupe_commit_failures_total{")
        and 'reason="not_enough_replicas"' in line
    )


def test_two_brokers_down_stall_then_resume(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    stream = scaled_stream(30_000, seed=66)
    for i in range(2):
        w = Worker(broker, names, index=i, extra_env=CLUSTER_ENV)
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready(180)
    feeder = Feeder(broker, names, stream, seconds=30)
    time.sleep(3)
    feeder.assert_flowing()
    down = cluster.brokers[1:]
    for b in down:
        b.signal(signal.SIGKILL)
    time.sleep(STALL_SECONDS)
    assert all(w.alive() for w in workers), "a worker exited while the cluster was short"
    said = [w for w in workers if STALL_LINE in w.log_text()]
    assert said, "no worker said why it stalled"
    assert sum(stall_metric(w) for w in workers) > 0
    down[0].start()  # two of three: min.insync.replicas is met again
    assert feeder.join() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers)
    down[1].start()
    cluster.wait_healthy(240)
    left_open = hanging(cluster)
    record(
        reliability,
        f"C6 two of three brokers down (below min.insync.replicas) for {STALL_SECONDS:.0f} s, "
        f"then one back ({33 * SCALE}k events)",
        len(stream.records),
        2,
        report,
        waited,
    )
    assert not left_open, left_open
