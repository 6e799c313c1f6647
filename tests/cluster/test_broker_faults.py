"""Broker faults on a three-broker cluster with Kafka's defaults (transaction version 2
finalized, eligible leader replicas on, replication 3, min.insync.replicas 2), while two
workers dedup a steady stream: kill -9 of partition leaders, of transaction and group
coordinators and of the controller, a rolling restart, and two brokers down at once. Each run
ends with the full verification (every id exactly once in the clean topic with read_committed,
every offset committed, no open transaction) and Kafka's own ``find-hanging`` on every broker.

Workers pick transactions v2 on this cluster, as on every Kafka 4.x cluster, and every row runs
on it. ``make soak`` also runs every row with v1 forced (the flow of every other Python client;
the fault tier runs the rows that meet the commit on v1 in every run, on a broker of that
version); C8, whose subject is the other clients, runs on v2.

How to run: ``make test-cluster`` (starts the cluster on 19300-19303 when it is not running);
each test prints its verifier lines and adds a row to docs/reliability.md's cluster section.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Callable, Sequence

import pytest

from scripts.kafka_cluster import Cluster
from scripts.kafka_cluster_nodes import Node
from tests.cluster.support import (
    assert_protocol,
    bounce,
    coordinator,
    hanging,
    leaders,
    protocol_of,
    two_workers,
    txn_version,
    worker_env,
)
from tests.faults.conftest import SCALE
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.faults

#: Every row: v2 (the worker's pick on this cluster), and v1 forced too at soak scale.
SOAK_BOTH = pytest.mark.parametrize("protocol", ["v2", "v1"] if SCALE > 1 else ["v2"])


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
    faults: Sequence[Callable[[], object]],
    protocol: str,
    *,
    unique: int = 25_000,
    seconds: float = 30,
) -> None:
    """Two workers on ``protocol``, a steady stream over about ``seconds``, each of ``faults``
    injected while a part of it flows; then every check, the hanging-transaction search and a
    row.

    The stream goes out in ``len(faults) + 1`` parts, one after the other, and fault i lands
    three seconds into part i. A fault's own wait (a broker coming back, its replicas catching
    up) takes as long as the machine makes it; with one feed over a fixed time, the second
    fault of a run on a slow machine met an idle worker."""
    stream = scaled_stream(unique, seed=zlib.crc32(fault.encode()) % 1000)
    two_workers(broker, names, workers, protocol)
    parts = len(faults) + 1
    sent = 0
    for i in range(parts):
        feeder = Feeder(broker, names, stream, seconds=seconds / parts, part=(i, parts))
        if i < len(faults):
            time.sleep(3)
            feeder.assert_flowing()
            faults[i]()
        sent += feeder.join()
    assert sent == len(stream.records)
    cluster.wait_healthy(240)
    report, waited = drain_and_verify(broker, names, workers)
    assert_protocol([w.log_text() for w in workers], protocol_of(cluster, protocol))
    left_open = hanging(cluster)
    print(f"\nfind-hanging: {left_open or 'none'}")
    version = txn_version(cluster, protocol)
    record(reliability, fault, len(stream.records), len(faults), report, waited, version)
    assert not left_open, left_open


@SOAK_BOTH
def test_kill_9_of_partition_leaders(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    def kill_the_busiest_leader() -> None:
        bounce(cluster, cluster.broker(busiest_leader(broker, names)))

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C1 kill -9 of the leader of the input, clean and changelog partitions "
        f"(x2, {27.5 * SCALE:g}k events)",
        [kill_the_busiest_leader, kill_the_busiest_leader],
        protocol,
    )


@SOAK_BOTH
def test_kill_9_of_the_transaction_coordinator(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    def kill_the_coordinator_of(partition: int) -> Callable[[], None]:
        txn_id = f"{names.app_id}-{names.input_topic}-{partition}"
        return lambda: bounce(
            cluster, cluster.broker(coordinator(broker.bootstrap, txn_id, transactional=True))
        )

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C2 kill -9 of the transaction coordinator of the workers' transactional ids "
        f"while they commit (x2, {27.5 * SCALE:g}k events)",
        [kill_the_coordinator_of(0), kill_the_coordinator_of(1)],
        protocol,
    )


@SOAK_BOTH
def test_kill_9_of_the_group_coordinator_during_a_rebalance(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    def join_and_kill_the_group_coordinator() -> None:
        third = Worker(broker, names, index=2, extra_env=worker_env(protocol))
        workers.append(third)
        third.start()  # joins the group: a rebalance
        time.sleep(1.0)
        group = coordinator(broker.bootstrap, names.app_id, transactional=False)
        bounce(cluster, cluster.broker(group), whole=False)  # run_row waits for it whole

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C3 kill -9 of the group coordinator while a third worker joins (rebalance) "
        f"({27.5 * SCALE:g}k events)",
        [join_and_kill_the_group_coordinator],
        protocol,
    )


@SOAK_BOTH
def test_rolling_restart_of_all_brokers(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    def restart(node: Node) -> Callable[[], None]:
        def fault() -> None:
            node.stop()  # SIGTERM: a controlled shutdown moves its leaders away first
            node.start()
            cluster.wait_healthy(240)

        return fault

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C4 rolling restart of all three brokers under load ({44 * SCALE}k events)",
        [restart(b) for b in cluster.brokers],
        protocol,
        unique=40_000,
        seconds=45,
    )


@SOAK_BOTH
def test_kill_9_of_the_controller(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    def kill_the_controller() -> None:
        bounce(cluster, cluster.controller, 8.0, whole=False)  # run_row waits for it whole

    run_row(
        cluster,
        broker,
        names,
        workers,
        reliability,
        f"C5 kill -9 of the KRaft controller while events flow ({27.5 * SCALE:g}k events)",
        [kill_the_controller],
        protocol,
    )
