"""Two workers share the partitions; one is killed (-9) at random moments and restarted while
the stream flows, so partitions move back and forth with their state. Exactly once throughout."""

from __future__ import annotations

import asyncio
import random
import signal
import threading
import time

import pytest

from scripts.streams import build_stream, produce
from scripts.topic_reader import read_topic
from scripts.verify import check
from tests.faults.conftest import Reliability
from tests.support import Broker, Names, Worker, wait_drained

pytestmark = pytest.mark.faults


def test_two_workers_with_kills_and_rebalances(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    rng = random.Random(44)
    a = Worker(broker, names, index=0, partitions=6)
    b = Worker(broker, names, index=1, partitions=6)
    workers.extend([a, b])
    a.start()
    a.wait_ready()
    stream = build_stream(80_000, 0.1, seed=21)
    done: list[int] = []
    feeder = threading.Thread(
        target=lambda: done.append(
            asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
        )
    )
    feeder.start()
    time.sleep(1.0)
    b.start()  # joins mid-stream: partitions move from a to b
    for _ in range(3):
        time.sleep(rng.uniform(3.0, 6.0))
        victim = rng.choice([a, b])
        victim.kill(signal.SIGKILL)
        time.sleep(rng.uniform(0.5, 2.0))
        victim.start()
    feeder.join()
    assert done == [len(stream.records)]
    started_drain = time.monotonic()
    wait_drained(broker, names, timeout=600, workers=workers)
    waited = time.monotonic() - started_drain
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): v for m, v in stream.unique.items()})
    print(f"\nevents={len(stream.records)} workers=2 kills=3 {report.line()}")
    reliability.record(
        "F4 rebalance churn (a 2nd worker joins; kill -9 x3)",
        events=len(stream.records),
        injected=4,
        duplicates=report.duplicates,
        missing=report.missing,
        recover_s=waited,
    )
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)
    both = a.log_text() + b.log_text()
    # Partitions really moved: a's first start, b's join, and each of the 3 restarts start tasks.
    assert both.count("starting transactional producers") >= 5
    assert "starting transactional producers" in b.log_text()
