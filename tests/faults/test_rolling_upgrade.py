"""F25: a rolling upgrade, as docs/operations.md "Upgrading" prescribes it: three workers with a
standby replica each, stopped (SIGTERM) and started again one at a time, the next only once the
last is ready again, while a steady stream flows. Each stop hands the worker's partitions to
the others (warm standby copies), each start takes some back. Exactly once throughout.

The restarted workers run the same code (a test cannot ship two releases); what a rolling
upgrade adds to a plain restart is the version checks, which the unit tier covers against the
fixtures of the current formats (tests/unit/test_format_fixtures.py).

    DEDUPE_TEST_KAFKA_PORT=19092 .venv/bin/python -m pytest tests/faults/test_rolling_upgrade.py
"""

from __future__ import annotations

import signal
import time

import pytest

from tests.faults.conftest import Reliability
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.faults.test_recovery_takeover import restores_logged
from tests.support import Broker, Names, Worker, get

pytestmark = pytest.mark.faults

PARTITIONS = 6
WORKERS = 3


def all_ready(fleet: list[Worker], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    # Twice in a row: a rebalance that starts right after one answer makes the next a 503.
    streak = 0
    while streak < 2:
        assert time.monotonic() < deadline, "the workers never all answered /ready"
        for w in fleet:
            assert w.alive(), f"worker {w.index} exited:\n{w.log_text()[-3000:]}"
        streak = streak + 1 if all(get(w, "/ready")[0] == 200 for w in fleet) else 0
        time.sleep(0.5)


def test_f25_rolling_upgrade_one_worker_at_a_time_under_load(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    env = {"DEDUPE_STANDBY_REPLICAS": "1"}
    fleet = [
        Worker(broker, names, index=i, partitions=PARTITIONS, extra_env=env) for i in range(WORKERS)
    ]
    workers.extend(fleet)
    for worker in fleet:
        worker.start()
        worker.wait_ready()
    stream = scaled_stream(90_000, seed=25)
    # Steady over ~100 s: longer than three stops and starts (15-25 s each on 2 cores), so
    # every restart meets a flowing stream.
    feeder = Feeder(broker, names, stream, seconds=100)
    time.sleep(8.0)
    ready_s = []
    for worker in fleet:
        feeder.assert_flowing()
        stopped = time.monotonic()
        assert worker.kill(signal.SIGTERM) == 0, worker.log_text()[-3000:]
        worker.start()
        worker.wait_ready()
        # As the procedure says: the next stop only once every worker answers /ready (the
        # others' takeovers and the partitions this one got back are restored).
        all_ready(fleet)
        ready_s.append(time.monotonic() - stopped)
    feeder.assert_flowing()
    assert feeder.join() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers, partitions=PARTITIONS)
    logs = [w.log_text() for w in fleet]
    restored = sum(sum(restores_logged(text).values()) for text in logs)
    print(
        f"\nrolling upgrade: events={len(stream.records)} restarts={WORKERS} "
        f"SIGTERM to every worker ready {', '.join(f'{s:.1f}s' for s in ready_s)}; "
        f"changelog offsets restored over the run: {restored}"
    )
    # Every worker stopped cleanly and came back: two "Ready" lines each.
    assert all(text.count("[^Worker]: Ready") == 2 for text in logs)
    record(
        reliability,
        "F25 rolling upgrade (3 workers, 1 standby, SIGTERM and restart one at a time)",
        len(stream.records),
        WORKERS,
        report,
        waited,
    )
