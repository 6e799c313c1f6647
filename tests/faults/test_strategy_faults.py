"""Every dedup strategy under kill -9 and rebalances: a stream of message-id events, events
without an id (fingerprints, re-keyed) and producer sequences, fed steadily while workers are
killed with SIGKILL, join and leave; the clean topic holds each event once (by its decision
key: ``scripts.verify_oracle.identity_of``), the first copy's bytes, nothing else."""

from __future__ import annotations

import asyncio
import dataclasses
import random
import signal
import time

import pytest

from scripts.streams import build_mixed_stream
from scripts.verify import verify_pipeline
from tests.faults.conftest import SCALE, Reliability
from tests.faults.scenario import Feeder, record, settings_of
from tests.support import Broker, Names
from tests.workers import Worker, drained, wait_drained

pytestmark = pytest.mark.faults

ENV = {"DEDUPE_MISSING_ID": "fingerprint"}


def test_every_strategy_under_kill_9_and_rebalances(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    rng = random.Random(20261125)
    stream = build_mixed_stream(24_000 * SCALE, 0.15, seed=19)
    a = Worker(broker, names, index=0, extra_env=ENV)
    b = Worker(broker, names, index=1, extra_env=ENV)
    workers.extend([a, b])
    a.start()
    a.wait_ready()
    started = time.monotonic()
    feeder = Feeder(broker, names, stream, seconds=30)
    faults = 0
    busy = 0
    # kill -9 the lone worker, then a second joins (rebalance), one of the two is killed,
    # restarted (rebalance), and the other killed.
    for step, (victim, joiner) in enumerate([(a, None), (None, b), (b, None), (a, None)]):
        time.sleep(rng.uniform(3.0, 6.0))
        feeder.assert_flowing()
        busy += not asyncio.run(drained(broker, names))
        if joiner is not None:
            joiner.start()
        if victim is not None:
            victim.kill(signal.SIGKILL)
            victim.start()
        faults += 1
        print(f"step {step}: {'kill -9 ' + str(victim.index) if victim else 'join'}", flush=True)
    assert feeder.join() == len(stream.records)
    waited = wait_drained(broker, names, timeout=900, workers=workers)
    settings = dataclasses.replace(settings_of(broker, names, 4), missing_id="fingerprint")
    report = asyncio.run(verify_pipeline(settings, first_copy=True))
    print(f"\nelapsed={time.monotonic() - started:.0f}s busy_faults={busy}")
    assert report.clean.distinct == len(stream.unique), report.lines()
    assert busy >= 3, "the faults must hit workers that still had work"
    record(
        reliability,
        "F19 every strategy (ids, fingerprints, producer sequences): kill -9 x3, join",
        len(stream.records),
        faults,
        report,
        waited,
    )


@pytest.mark.parametrize("fault", ["sent=kill@1500", "committed=kill@3"])
def test_producer_sequences_survive_a_kill_at_an_exact_point(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability, fault: str
) -> None:
    """Pulsar lost data when a failed write left a sequence marked as persisted, so its retry
    looked like a duplicate (apache/pulsar#5218). Here the highest sequence is staged in the
    task's transaction with the output: killed after the send (not committed) or right after
    the commit (not yet applied to RocksDB), the restarted worker must forward every sequence
    once."""
    mixed = build_mixed_stream(9_000 * SCALE, 0.2, seed=23)
    stream = dataclasses.replace(
        mixed,
        records=[r for r in mixed.records if any(h == "dedupe.producer" for h, _ in r.headers)],
        unique={k: v for k, v in mixed.unique.items() if k.startswith("producer-")},
    )
    worker = Worker(broker, names, extra_env={"DEDUPE_FAULT_INJECTION": fault})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    feeder = Feeder(broker, names, stream)
    assert worker.proc is not None
    code = worker.proc.wait(300)
    assert code == -signal.SIGKILL, f"the worker did not die at {fault}: exit {code}"
    worker.extra_env = {}
    worker.start()
    assert feeder.join() == len(stream.records)
    waited = wait_drained(broker, names, timeout=900, workers=workers)
    report = asyncio.run(verify_pipeline(settings_of(broker, names, 4), first_copy=True))
    assert report.clean.distinct == len(stream.unique), report.lines()
    record(
        reliability,
        "F19a producer sequences: kill -9 after the send and after the commit",
        len(stream.records),
        1,
        report,
        waited,
    )
