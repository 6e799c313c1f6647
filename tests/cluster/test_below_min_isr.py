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
from tests.cluster.support import (
    assert_protocol,
    hanging,
    protocol_of,
    two_workers,
    txn_version,
)
from tests.cluster.test_broker_faults import SOAK_BOTH
from tests.faults.conftest import SCALE
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import Broker, Names
from tests.workers import Worker, get

pytestmark = pytest.mark.faults

#: Long enough for two looks of the workers' replica watch (every 10 s: app/eos/replicas.py).
STALL_SECONDS = 25.0
#: The worker's log line while the cluster refuses its writes.
STALL_LINE = "fewer replicas in sync than min.insync.replicas"


def partitions_short(worker: Worker) -> float:
    """The worker's ``dedupe_partitions_below_min_insync``, summed over topics."""
    status, body = get(worker, "/metrics")
    assert status == 200, body
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in str(body).splitlines()
        if line.startswith("dedupe_partitions_below_min_insync{")
    )


@SOAK_BOTH
def test_two_brokers_down_stall_then_resume(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    stream = scaled_stream(25_000, seed=66)
    two_workers(broker, names, workers, protocol)
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
    assert all(partitions_short(w) > 0 for w in workers)
    down[0].start()  # two of three: min.insync.replicas is met again
    assert feeder.join() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers)
    assert_protocol([w.log_text() for w in workers], protocol_of(cluster, protocol))
    # Two of three in sync again once the returned broker caught up: the watch says so.
    deadline = time.monotonic() + 60
    while any(partitions_short(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(2)
    assert not any(partitions_short(w) for w in workers)
    assert all("enough replicas in sync again" in w.log_text() for w in workers)
    down[1].start()
    cluster.wait_healthy(240)
    left_open = hanging(cluster)
    record(
        reliability,
        f"C6 two of three brokers down (below min.insync.replicas) for {STALL_SECONDS:.0f} s, "
        f"then one back ({27.5 * SCALE:g}k events)",
        len(stream.records),
        2,
        report,
        waited,
        txn_version(cluster, protocol),
    )
    assert not left_open, left_open
