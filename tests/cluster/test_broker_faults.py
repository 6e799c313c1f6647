"""Broker faults on a three-broker cluster with Kafka's defaults (transaction version 2
finalized, eligible leader replicas on, replication 3, min.insync.replicas 2), while two
workers dedup a steady stream: kill -9 of partition leaders, of transaction and group
coordinators and of the controller, a rolling restart, and two brokers down at once. Each run
ends with the full verification (every id exactly once in the clean topic with read_committed,
every offset committed, no open transaction) and Kafka's own ``find-hanging`` on every broker.

How to run: ``make test-cluster`` (starts the cluster on 19300-19303 when it is not running);
each test prints its verifier lines and adds a row to docs/reliability.md's cluster section.
"""

from __future__ import annotations

import signal
import time
import zlib
from collections.abc import Callable

import pytest

from scripts.kafka_cluster import Cluster
from tests.cluster.support import assert_protocol, coordinator, hanging, leaders, protocol_of
from tests.faults.conftest import SCALE
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import Broker, Names, Worker

pytestmark = pytest.mark.faults

#: Replication 3 for the topics the workers create (Kafka's broker default would do the same;
#: said outright so the test does not depend on it).
CLUSTER_ENV = {"DEDUPE_REPLICATION_FACTOR": "3"}


def two_workers(broker: Broker, names: Names, workers: list[Worker]) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i, extra_env=CLUSTER_ENV)
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready(180)


def busiest_leader(broker: Broker, names: Names) -> int:
    """The broker leading most partitions of the input, clean and changelog topics."""
    counts = leaders(
        broker.bootstrap, [names.input_topic, names.output_topic, names.changelog_topic]
    )
    return counts.most_common(1)[0][0]


def run_row(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    fault: str,
    inject: Callable[[Feeder], int],
    *,
    unique: int = 25_000,
    seconds: float = 30,
) -> None:
    """Two workers, a steady stream over ``seconds``, ``inject`` (returns the faults it
    injected) while it flows; then every check, the hanging-transaction search and a row."""
    stream = scaled_stream(unique, seed=zlib.crc32(fault.encode()) % 1000)
    two_workers(broker, names, workers)
    feeder = Feeder(broker, names, stream, seconds=seconds)
    time.sleep(3)
    injected = inject(feeder)
    assert feeder.join() == len(stream.records)
    cluster.wait_healthy(240)
    report, waited = drain_and_verify(broker, names, workers)
    assert_protocol([w.log_text() for w in workers], protocol_of(cluster))
    left_open = hanging(cluster)
    print(f"\nfind-hanging: {left_open or 'none'}")
    record(reliability, fault, len(stream.records), injected, report, waited)
    assert not left_open, left_open


def test_kill_9_of_partition_leaders(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    def inject(feeder: Feeder) -> int:
        for _ in range(2):
            feeder.assert_flowing()
            victim = cluster.broker(busiest_leader(broker, names))
            victim.signal(signal.SIGKILL)
            time.sleep(5)
            victim.start()
            cluster.wait_healthy(240)
        return 2

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C1 kill -9 of the leader of the input, clean and changelog partitions "
        f"(x2, {27.5 * SCALE:g}k events)",
        inject,
    )


def test_kill_9_of_the_transaction_coordinator(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    def inject(feeder: Feeder) -> int:
        for p in (0, 1):
            feeder.assert_flowing()
            txn_id = f"{names.app_id}-{names.input_topic}-{p}"
            victim = cluster.broker(coordinator(broker.bootstrap, txn_id, transactional=True))
            victim.signal(signal.SIGKILL)
            time.sleep(5)
            victim.start()
            cluster.wait_healthy(240)
        return 2

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C2 kill -9 of the transaction coordinator of the workers' transactional ids "
        f"while they commit (x2, {27.5 * SCALE:g}k events)",
        inject,
    )


def test_kill_9_of_the_group_coordinator_during_a_rebalance(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    def inject(feeder: Feeder) -> int:
        feeder.assert_flowing()
        third = Worker(broker, names, index=2, extra_env=CLUSTER_ENV)
        workers.append(third)
        third.start()  # joins the group: a rebalance
        time.sleep(1.0)
        victim = cluster.broker(coordinator(broker.bootstrap, names.app_id, transactional=False))
        victim.signal(signal.SIGKILL)
        time.sleep(5)
        victim.start()
        return 1

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C3 kill -9 of the group coordinator while a third worker joins (rebalance) "
        f"({27.5 * SCALE:g}k events)",
        inject,
    )


def test_rolling_restart_of_all_brokers(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    def inject(feeder: Feeder) -> int:
        for b in cluster.brokers:
            b.stop()  # SIGTERM: a controlled shutdown moves its leaders away first
            b.start()
            cluster.wait_healthy(240)
        return len(cluster.brokers)

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C4 rolling restart of all three brokers under load ({44 * SCALE}k events)",
        inject,
        unique=40_000,
        seconds=45,
    )


def test_kill_9_of_the_controller(
    cluster: Cluster, broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    def inject(feeder: Feeder) -> int:
        feeder.assert_flowing()
        cluster.controller.signal(signal.SIGKILL)
        time.sleep(8)
        cluster.controller.start()
        return 1

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C5 kill -9 of the KRaft controller while events flow ({27.5 * SCALE:g}k events)",
        inject,
    )
