"""F2: kill -9 the worker at exact points of a record's life and of its transaction, then
restart it on the same data dir and on a wiped one. Exactly-once must hold at every point."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
import zlib

import pytest

from tests.faults.conftest import SCALE, Reliability
from tests.faults.scenario import Feeder, drain_and_verify, scaled_stream
from tests.support import Broker, Names
from tests.workers import Worker, get

pytestmark = pytest.mark.faults

# (point, n-th visit): per record for stored/sent/processed, per commit for commit/committed,
# per rebalance for rebalance (the 2nd: when a second worker joins mid-stream).
POINTS = [
    ("stored", 3_000),
    ("sent", 3_000),
    ("processed", 3_000),
    ("commit", 12),
    ("committed", 12),
    ("rebalance", 2),
]
#: The stream is fed over about this long; at 100 ms per commit and 4 partitions that is some
#: 200 commits, and the rebalance point's second worker joins 2 s in, while it flows.
FEED_SECONDS = 5.0


# At CI size each point restarts once, on the same dir or a wiped one in turn; the soak
# (DEDUPE_FAULT_SCALE > 1) restarts every point both ways.
CASES = [
    pytest.param(point, at, wipe, id=f"{point}-{'wiped' if wipe else 'same'}-dir")
    for i, (point, at) in enumerate(POINTS)
    for wipe in (False, True)
    if SCALE > 1 or wipe == bool(i % 2)
]


@pytest.mark.parametrize(("point", "at", "wipe"), CASES)
@pytest.mark.both_protocols
def test_kill_at_an_exact_point(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    point: str,
    at: int,
    wipe: bool,
) -> None:
    fault = f"{point}=kill@{at}"
    worker = Worker(broker, names, extra_env={"DEDUPE_FAULT_INJECTION": fault})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    stream = scaled_stream(10_000, seed=zlib.crc32(point.encode()) % 1000)
    # A steady feed, so the point is reached while the stream flows. At full speed the worker
    # took the whole stream in 16-30 commits (6 rounds measured), and one CI run in about 20
    # got through it in fewer than the 12 that "commit@12" and "committed@12" wait for: the
    # worker went idle, alive, and the test waited out its 300 s.
    feeder = Feeder(broker, names, stream, seconds=FEED_SECONDS)
    if point == "rebalance":
        time.sleep(2)
        helper = Worker(broker, names, index=1)
        workers.append(helper)
        helper.start()  # joining makes the first worker rebalance
    assert worker.proc is not None
    try:
        code = worker.proc.wait(300)
    except subprocess.TimeoutExpired:
        _, stats = get(worker, "/stats")
        pytest.fail(f"the worker never reached {fault}; its /stats: {stats}")
    assert code == -signal.SIGKILL, f"the worker did not die at {fault}: exit {code}"
    if wipe:
        shutil.rmtree(worker.data_dir)
    worker.extra_env = {}
    worker.start()
    feeder.join()
    report, waited = drain_and_verify(broker, names, workers)
    print(f"\n{fault} wipe={wipe}: " + " | ".join(report.lines()))
    reliability.record(
        "F2 kill -9 at exact points (same and wiped dir)",
        events=len(stream.records),
        injected=1,
        duplicates=report.clean.duplicates,
        missing=report.clean.missing,
        recover_s=waited,
    )
    assert report.ok, "\n".join(report.lines())
