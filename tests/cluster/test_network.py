"""One broker cut off from the workers (the other two, and the brokers among themselves,
still reachable): the workers reach the cluster only through fault proxies
(tests/faults/proxy.py), one per broker, and the proxy of the broker leading most of the
pipeline's partitions drops every byte for a while. That broker stays healthy to the controller,
so its leaders do not move: the workers must wait for it, lose nothing, and commit nothing twice.

How to run: part of ``make test-cluster``.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest

from scripts.kafka_cluster import Cluster
from tests.cluster.support import (
    assert_protocol,
    hanging,
    protocol_of,
    two_workers,
    txn_version,
)
from tests.cluster.test_broker_faults import SOAK_BOTH, busiest_leader
from tests.faults.conftest import SCALE
from tests.faults.proxy import Link
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.faults

CUT_SECONDS = 25.0


@pytest.fixture
def links(cluster: Cluster) -> Iterator[list[Link]]:
    for b in cluster.brokers:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", b.proxied_port)) != 0:
                pytest.fail(
                    f"{b.name} has no proxied listener on {b.proxied_port}: the cluster was "
                    "started without proxied=True; stop it (python -m scripts.kafka_cluster "
                    "down, KAFKA_CLUSTER_PORT as the tier's) and run again"
                )
    started: list[Link] = []
    try:
        for b in cluster.brokers:
            started.append(
                Link(listen_port=b.proxy_port, target_port=b.proxied_port, seed=b.id).start()
            )
        yield started
    finally:
        for link in started:
            link.stop()


@SOAK_BOTH
def test_one_broker_cut_off_from_the_workers(
    cluster: Cluster,
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    links: list[Link],
    protocol: str,
) -> None:
    via = Broker(",".join(f"127.0.0.1:{b.proxy_port}" for b in cluster.brokers), broker.port)
    stream = scaled_stream(25_000, seed=77)
    two_workers(via, names, workers, protocol)
    feeder = Feeder(broker, names, stream, seconds=30)  # the feed goes direct
    time.sleep(3)
    feeder.assert_flowing()
    victim = busiest_leader(broker, names)
    link = links[victim - 1]
    link.cut("both")
    time.sleep(CUT_SECONDS)
    assert all(w.alive() for w in workers), "a worker exited while a broker was cut off"
    reset = link.heal()
    assert link.dropped_bytes > 0, "the cut met no traffic"
    assert feeder.join() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers)
    assert_protocol([w.log_text() for w in workers], protocol_of(cluster, protocol))
    left_open = hanging(cluster)
    print(f"\ncut broker {victim}: {link.dropped_bytes} bytes dropped, {reset} connections reset")
    record(
        reliability,
        f"C7 the broker leading most partitions cut off from the workers for "
        f"{CUT_SECONDS:.0f} s (fault proxy; the others reachable) ({27.5 * SCALE:g}k events)",
        len(stream.records),
        1,
        report,
        waited,
        txn_version(cluster, protocol),
    )
    assert not left_open, left_open
