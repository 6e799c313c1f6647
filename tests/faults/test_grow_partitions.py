"""F24: grow a running pipeline from 8 to 16 partitions (``python -m app grow``) while events
flow, with a kill -9 of the tool mid-move and of a worker during the catch-up; the clean topic
still holds every unique event exactly once.

How to run: ``DEDUPE_TEST_KAFKA_PORT=... .venv/bin/python -m pytest
tests/faults/test_grow_partitions.py -q -s`` (a real broker; real worker processes).

The stream's repeats (immediate, late by thousands of records, null-keyed) span the move: the
first half is fed by one producer from before the workers stop until after they restart, so
its metadata still says 8 partitions and the workers re-key what it places by the old count;
the second half by a new producer that places by 16.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import time

import pytest
from aiokafka.admin import AIOKafkaAdminClient

from app.admin.grow_kafka import group_members
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.reliability import Reliability
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, get

pytestmark = pytest.mark.faults

OLD, NEW = 8, 16
#: Each worker keeps a warm copy of the other's partitions: the old copies must apply the
#: moves' tombstones and the new ones restore from nothing, like the partitions themselves.
STANDBYS = {"DEDUPE_STANDBY_REPLICAS": "1"}


def grow_command(worker: Worker, chunk: int) -> list[str]:
    return [sys.executable, "-m", "app", "grow", "--partitions", str(NEW), "--chunk", str(chunk)]


def run_grow(worker: Worker, chunk: int = 500) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        grow_command(worker, chunk),
        env=worker.env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


def kill_after_first_progress(worker: Worker) -> str:
    """Start the tool with small chunks and kill -9 it once it reported its first committed
    chunk; returns what it printed."""
    proc = subprocess.Popen(
        grow_command(worker, 50),
        env=worker.env(),
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if "(committed)" in line:
            proc.send_signal(signal.SIGKILL)
            break
    proc.wait(60)
    assert proc.returncode == -signal.SIGKILL, "".join(lines)
    return "".join(lines)


def wait_group_empty(broker: Broker, names: Names, timeout: float = 60) -> None:
    async def members() -> list[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            return await group_members(admin, names.app_id)
        finally:
            await admin.close()

    deadline = time.monotonic() + timeout
    while asyncio.run(members()):
        assert time.monotonic() < deadline, "the worker group did not empty"
        time.sleep(0.5)


def ids_held(grown: list[Worker], timeout: float = 60) -> dict[int, int]:
    """Ids held per partition, from the ``/stats`` of the workers that own them now."""
    deadline = time.monotonic() + timeout
    while True:
        held: dict[int, int] = {}
        for w in grown:
            status, stats = get(w, "/stats")
            if status == 200:
                for p, s in stats["partitions"].items():
                    held[int(p)] = int(s["ids_held"])
        if sorted(held) == list(range(NEW)) or time.monotonic() > deadline:
            return held
        time.sleep(1)


def copies_and_owned(worker: Worker, timeout: float = 90) -> set[int]:
    """The seen_ids partitions ``worker`` owns or keeps a standby copy of, once it covers all
    of them (the other worker's new partitions included)."""
    deadline = time.monotonic() + timeout
    while True:
        status, stats = get(worker, "/stats")
        covered: set[int] = set()
        if status == 200:
            covered = {int(p) for p in stats["partitions"]} | {
                s["partition"]
                for name, s in stats["standbys"].items()
                if "-seen_ids-changelog-" in name
            }
        if covered == set(range(NEW)) or time.monotonic() > deadline:
            return covered
        time.sleep(1)


def test_grow_8_to_16_partitions_with_kills(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    stream = scaled_stream(50_000, seed=45, duplicates=0.2)
    old = [Worker(broker, names, index=i, partitions=OLD, extra_env=STANDBYS) for i in range(2)]
    workers.extend(old)
    for w in old:
        w.start()
    for w in old:
        w.wait_ready()
    first_half = Feeder(broker, names, stream, seconds=150, part=(0, 2))
    time.sleep(20)

    refused = run_grow(old[0])
    assert refused.returncode == 1 and "worker(s) of group" in refused.stderr, refused.stderr

    for w in old:
        assert w.kill(signal.SIGTERM) == 0
    wait_group_empty(broker, names)
    moving_started = time.monotonic()
    killed_output = kill_after_first_progress(old[0])
    first_half.assert_flowing()
    print(killed_output)
    rerun = run_grow(old[0])
    print(rerun.stdout)
    move_seconds = time.monotonic() - moving_started
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    totals = re.search(r"ids held: (\d+), moved by this run: (\d+)", rerun.stdout)
    assert totals, rerun.stdout
    moved_after_kill = int(totals.group(2))
    assert moved_after_kill > 0, rerun.stdout
    again = run_grow(old[0])
    assert again.returncode == 0 and "nothing to do" in again.stdout, again.stdout
    # the same ids, each counted once, and none left to move
    assert f"ids held: {totals.group(1)}, moved by this run: 0" in again.stdout, again.stdout

    # A worker started with the old count still refuses: the topics have NEW partitions now.
    stale = Worker(broker, names, index=5, partitions=OLD)
    stale.start()
    assert stale.proc is not None and stale.proc.wait(120) != 0
    assert f"has {NEW} partitions, DEDUPE_PARTITIONS is {OLD}" in stale.log_text()

    first_half.assert_flowing()
    grown = [Worker(broker, names, index=i, partitions=NEW, extra_env=STANDBYS) for i in range(2)]
    workers.extend(grown)
    for w in grown:
        w.start()  # the same data dirs: old-layout stores catch up from the changelog's tail
    for w in grown:
        w.wait_ready()
    covered = copies_and_owned(grown[0])
    assert covered == set(range(NEW)), covered
    second_half = Feeder(broker, names, stream, seconds=20, part=(1, 2))
    time.sleep(4)
    second_half.assert_flowing()
    grown[1].kill(signal.SIGKILL)
    grown[1].start()
    sent = first_half.finish() + second_half.finish()
    assert sent == len(stream.records)

    report, waited = drain_and_verify(broker, names, workers, partitions=NEW)
    held = ids_held(grown)
    # Each id is held once: the old-layout stores applied the tombstones of the moved ids from
    # the changelog's tail, and the new partitions were restored from nothing.
    assert sum(held.values()) == len(stream.unique), held
    print(f"\nids held per partition after the growth: {held}")
    print(
        f"\ngrow {OLD}->{NEW}: killed run printed {killed_output.count('(committed)')} chunk "
        f"line(s); re-run: {totals.group(0)}; tool runs and restarts {move_seconds:.1f}s"
    )
    record(
        reliability,
        f"F24 partitions grown {OLD} -> {NEW} while events flow (kill -9 of the tool mid-move, "
        "then of a worker in the catch-up; standbys on)",
        events=len(stream.records),
        injected=2,
        report=report,
        waited=waited,
    )
