"""Rebalance churn: up to three workers join, die (kill -9) and leave (SIGTERM) while the stream
flows, so partitions move back and forth with their state. Exactly once throughout."""

from __future__ import annotations

import random
import signal
import time

import pytest

from tests.faults.conftest import Reliability
from tests.faults.scenario import Feeder, drain_and_verify, scaled_stream
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.faults

PARTITIONS = 6


def test_three_workers_join_die_and_leave_while_the_stream_flows(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    rng = random.Random(44)
    a, b, c = (Worker(broker, names, index=i, partitions=PARTITIONS) for i in range(3))
    workers.extend([a, b, c])
    a.start()
    a.wait_ready()
    stream = scaled_stream(40_000, seed=21)
    # Steady over ~90 s, longer than the churn below: at full speed the workers had the whole
    # stream done in seconds, before most of the joins and kills. The churn waits for each
    # start to take partitions, which took over 45 s in all on a loaded machine.
    feeder = Feeder(broker, names, stream, seconds=90)
    time.sleep(1.0)
    b.start()  # joins mid-stream: partitions move from a to b
    b.wait_assigned()
    c.start()  # a third joins: partitions move again
    c.wait_assigned()
    faults = 2
    # Each victim is killed only once it owns partitions again: with fixed sleeps alone, a
    # loaded machine had a restarted worker still booting at its next kill, so that kill moved
    # no partitions and the churn was smaller than this test claims.
    for victim in (a, b, a):
        time.sleep(rng.uniform(1.0, 3.0))
        victim.kill(signal.SIGKILL)
        time.sleep(rng.uniform(0.5, 2.0))
        victim.start()
        victim.wait_assigned()
        faults += 1
    time.sleep(rng.uniform(1.0, 3.0))
    assert feeder.flowing(), (
        "the stream had ended before the last fault: the churn met idle workers"
    )
    assert c.kill(signal.SIGTERM) == 0  # leaves for good, cleanly: its partitions move to a, b
    faults += 1
    assert feeder.finish() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers, partitions=PARTITIONS)
    print(f"\nevents={len(stream.records)} workers=3 faults={faults} " + " | ".join(report.lines()))
    reliability.record(
        "F4 rebalance churn (3 workers join, kill -9 x3, one leaves)",
        events=len(stream.records),
        injected=faults,
        duplicates=report.clean.duplicates,
        missing=report.clean.missing,
        recover_s=waited,
    )
    assert report.ok, "\n".join(report.lines())
    logs = a.log_text() + b.log_text() + c.log_text()
    # Partitions really moved: the first start, two joins and 3 restarts started tasks (each
    # waited for above), and c's leave handed its partitions to a or b.
    assert logs.count("starting transactional producers") >= 7
    assert all("starting transactional producers" in w.log_text() for w in (a, b, c))
