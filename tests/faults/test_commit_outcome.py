"""Transaction errors in the middle of the stream keep exactly-once.

- A commit whose answer is lost (its outcome unknown to the worker), made deterministic with the
  worker's fault-injection point: the request reached the broker (it committed) or never left
  (it did not). The worker must recreate the producer with the same transactional id, never
  abort, learn from the group's committed offsets which it was, and go on accordingly.
- A commit the broker acknowledged and then rolled back (seen once in CI, at a graceful broker
  restart, fault test F6): the store applied it, the group's offsets and the changelog do not
  hold it. After a restart the store's source offsets are past the group's: the worker must not
  start there, and must not keep the rolled-back ids, but rebuild the partition's state.
- The broker stops answering (SIGSTOP, longer than the commit timeout) at random moments: each
  transaction it meets fails and is aborted (or resolved, when its commit was out), never kept
  half-done.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import threading
import time

import pytest
from aiokafka.structs import TopicPartition as TP

from scripts.streams import build_stream, produce
from scripts.topic_reader import end_offsets, read_topic
from scripts.verify import check
from tests.faults.conftest import SCALE, Reliability
from tests.faults.hanging_support import hang_a_transaction
from tests.faults.scenario import drain_and_verify, record, started
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.faults


def broker_pid(broker: Broker) -> int:
    result = broker.script("pid")
    assert result.returncode == 0, result.stdout + result.stderr
    return int(result.stdout.strip())


@pytest.mark.parametrize(
    "fault, outcome",
    [
        ("commit=lose-response@30", "the transaction did commit"),
        ("commit=lose-request@30", "the transaction did not commit (outcome was unknown)"),
    ],
    ids=["committed", "not-committed"],
)
@pytest.mark.both_protocols
def test_a_commit_with_unknown_outcome_is_resolved_not_aborted(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    fault: str,
    outcome: str,
) -> None:
    worker = started(broker, names, workers, extra_env={"DEDUPE_FAULT_INJECTION": fault})
    stream = build_stream(30_000 * SCALE, 0.1, seed=13)
    # A steady feed (~11 s) makes many commits, so the 30th is one in the middle of the stream:
    # at full speed the worker may finish the stream in fewer commits than that.
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records, rate=3_000 * SCALE))
    wait_drained(broker, names, timeout=300, workers=workers)
    log = worker.log_text()
    assert log.count("commit outcome unknown") == 1
    assert outcome in log
    assert worker.alive() and worker.starts == 1
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): v for m, v in stream.unique.items()})
    print(f"\n{fault}: {outcome!r}; {report.line()}")
    reliability.record(
        "F8a commit outcome unknown (answer lost, committed or not)",
        events=len(stream.records),
        injected=1,
        duplicates=report.duplicates,
        missing=report.missing,
        recover_s=0.0,
    )
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)


@pytest.mark.both_protocols
def test_a_commit_rolled_back_after_it_was_acknowledged_is_not_kept(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    # Transactions of a second hold hundreds of first sightings each (at 100 ms one may hold a
    # few repeats only, re-keyed through the repartition topic, whose loss the check cannot see).
    worker = started(
        broker,
        names,
        workers,
        extra_env={"DEDUPE_FAULT_INJECTION": "commit=roll-back@20", "DEDUPE_COMMIT_INTERVAL": "1s"},
    )
    stream = build_stream(30_000 * SCALE, 0.1, seed=14)
    feeder = threading.Thread(
        target=lambda: asyncio.run(
            produce(broker.bootstrap, names.input_topic, stream.records, rate=3_000 * SCALE)
        )
    )
    feeder.start()
    deadline = time.monotonic() + 120
    while worker.alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not worker.alive(), "the roll-back fault never fired"
    killed_at = time.monotonic()
    worker.extra_env = {"DEDUPE_COMMIT_INTERVAL": "1s"}
    worker.start()
    worker.wait_ready()
    feeder.join()
    report, _ = drain_and_verify(broker, names, workers)
    fault = "F8b a commit acknowledged, then rolled back by the broker (then kill -9)"
    record(reliability, fault, len(stream.records), 1, report, time.monotonic() - killed_at)
    log = worker.log_text()
    assert "reporting it committed" in log
    assert "the store holds a transaction that did not commit" in log
    assert "the broker returned a stale committed offset" not in log  # no raise past it


@pytest.mark.both_protocols
def test_a_transaction_the_broker_left_open_on_the_changelog_is_committed_through(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """F6 in CI: a single broker's restart dropped the markers of a transaction
    its coordinator then counted as finished; the worker's recovery waited on it for 900 s."""
    stream = build_stream(20_000 * SCALE, 0.1, seed=15)
    half = len(stream.records) // 2
    worker = started(broker, names, workers)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[:half]))
    wait_drained(broker, names, timeout=300, workers=workers)
    worker.kill(signal.SIGTERM)
    tp = TP(names.changelog_topic, 0)
    held, end = hang_a_transaction(broker, names, tp)
    hung_at = time.monotonic()
    worker.start()
    worker.wait_ready(timeout=180)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[half:]))
    report, _ = drain_and_verify(broker, names, workers, timeout=300)
    fault = "F8c a transaction the broker left open on a changelog partition (hanging)"
    record(reliability, fault, len(stream.records), 1, report, time.monotonic() - hung_at)
    log = worker.log_text()
    # Held open by the task's own producer id: ended by its record-less commit, no marker
    # written for another id.
    assert f"a transaction stays open on {tp.topic}-0 (producer id " in log, log[-3000:]
    assert "Committing through it" in log
    assert "wrote commit markers for the older producer id" not in log
    settled = asyncio.run(end_offsets(broker.bootstrap, tp.topic))[0]
    assert settled >= end + 1, (settled, end, held)  # the copies and the commit marker


@pytest.mark.both_protocols
def test_broker_pauses_keep_exactly_once(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    rng = random.Random(8)
    worker = started(
        broker,
        names,
        workers,
        extra_env={"DEDUPE_COMMIT_TIMEOUT": "2s", "DEDUPE_SESSION_TIMEOUT": "10s"},
    )
    stream = build_stream(60_000 * SCALE, 0.1, seed=12)
    done: list[int] = []
    # A steady feed (~22 s at 3,000/s) keeps transactions open through the pauses: the worker
    # processes faster than that, so a feed as fast as can be was done before the first pause.
    feeder = threading.Thread(
        target=lambda: done.append(
            asyncio.run(
                produce(broker.bootstrap, names.input_topic, stream.records, rate=3_000 * SCALE)
            )
        )
    )
    feeder.start()
    pid = broker_pid(broker)
    pauses = 3
    try:
        for _ in range(pauses):
            time.sleep(rng.uniform(1.5, 3.0))
            os.kill(pid, signal.SIGSTOP)
            time.sleep(rng.uniform(4.0, 6.0))  # > DEDUPE_COMMIT_TIMEOUT
            os.kill(pid, signal.SIGCONT)
    finally:
        os.kill(pid, signal.SIGCONT)
    feeder.join()
    assert done == [len(stream.records)]
    waited = wait_drained(broker, names, timeout=600, workers=workers)

    log = worker.log_text()
    unknown = log.count("commit outcome unknown")
    # A transaction meets a pause wherever it is: sending or committing ("transaction failed
    # before the commit" / "while processing"), committing with the answer lost ("commit
    # outcome unknown"), or asking the broker about a gap before a record ("could not learn").
    failed = log.count("transaction failed ")
    gap_unknown = log.count("could not learn what lies between offsets")
    records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    report = check(names.output_topic, records, {m.encode(): v for m, v in stream.unique.items()})
    print(
        f"\nevents={len(stream.records)} broker pauses={pauses} "
        f"unknown-outcome commits={unknown} failed transactions={failed} "
        f"unanswered gap checks={gap_unknown} "
        f"did-commit={log.count('the transaction did commit')} "
        f"did-not-commit={log.count('did not commit (outcome was unknown)')} "
        f"worker starts={worker.starts} duplicates={report.duplicates} missing={report.missing}"
    )
    reliability.record(
        "F8 broker SIGSTOP longer than the commit timeout (x3)",
        events=len(stream.records),
        injected=pauses,
        duplicates=report.duplicates,
        missing=report.missing,
        recover_s=waited,
    )
    assert unknown + failed + gap_unknown >= 1, "no transaction met a pause: nothing was exercised"
    # Producers dropped while the broker was paused leave no orphaned futures or tasks behind.
    for orphan in ("exception was never retrieved", "Task was destroyed but it is pending"):
        assert orphan not in log, f"worker log has {orphan!r}"
    assert report.exactly_once, report.line() + "\n" + "\n".join(report.examples)
