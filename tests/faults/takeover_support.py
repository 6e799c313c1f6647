"""Shared by the takeover and restore fault tests (tests/faults/test_recovery_takeover.py,
tests/faults/test_restore_faults.py): waiting for a worker to own its partitions, the ids by
partition, the check that a store holds them, and sending them again to verify."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

from app.rules import partition_for
from scripts.streams import Stream, produce
from tests.faults.conftest import Reliability
from tests.faults.scenario import drain_and_verify, record
from tests.support import Broker, Names
from tests.workers import Worker, get, wait_drained


def wait_owning(worker: Worker, partitions: set[int], timeout: float = 240) -> float:
    """Block until ``worker`` is ready (state recovered) with exactly ``partitions``."""
    started = time.monotonic()
    body: Any = None
    while time.monotonic() - started < timeout:
        status, body = get(worker, "/ready")
        if status == 200 and set(body["partitions"]) == partitions:
            return time.monotonic() - started
        if not worker.alive():
            raise AssertionError(f"worker exited:\n{worker.log_text()[-4000:]}")
        time.sleep(0.25)
    raise AssertionError(
        f"worker {worker.index} not ready with {sorted(partitions)} after {timeout}s "
        f"(last /ready: {body}):\n{worker.log_text()[-4000:]}"
    )


def ids_by_partition(stream: Stream, partitions: int) -> dict[int, list[str]]:
    by: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for message_id in stream.unique:
        by[partition_for(message_id.encode(), partitions)].append(message_id)
    return by


def assert_store_holds(
    worker: Worker, owned: set[int], expected: dict[int, list[str]], seed: int
) -> None:
    """The store of ``worker`` holds every id of its partitions: the count per partition from
    ``/stats`` and a sample of point lookups (``/messages/{id}``, a RocksDB read)."""
    status, stats = get(worker, "/stats")
    assert status == 200, stats
    held = {int(p): s["ids_held"] for p, s in stats["partitions"].items()}
    want = {p: len(expected[p]) for p in owned}
    assert held == want, f"worker {worker.index}: ids held {held}, changelog holds {want}"
    rng = random.Random(seed)
    for p in sorted(owned):
        for message_id in rng.sample(expected[p], 50):
            status, body = get(worker, f"/messages/{message_id}")
            assert status == 200 and body["held"], f"{message_id} (partition {p}): {body}"


def send_again_and_verify(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    stream: Stream,
    partitions: int,
    reliability: Reliability,
    fault: str,
    injected: int,
) -> None:
    """Send every event again; the clean topic must hold each id exactly once."""
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    report, waited = drain_and_verify(broker, names, workers, partitions=partitions)
    record(reliability, fault, 2 * len(stream.records), injected, report, waited)


def one_worker_processed(
    broker: Broker,
    names: Names,
    workers: list[Worker],
    stream: Stream,
    partitions: int,
    extra_env: dict[str, str] | None = None,
) -> Worker:
    """A worker that owns every partition and has processed all of ``stream``."""
    worker = Worker(broker, names, index=0, partitions=partitions, extra_env=extra_env or {})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, timeout=300, workers=workers)
    return worker


def wait_split(a: Worker, b: Worker, partitions: int, timeout: float = 240) -> set[int]:
    """Block until both workers are ready and own all partitions between them, each some;
    returns ``a``'s."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        (sa, ra), (sb, rb) = get(a, "/ready"), get(b, "/ready")
        if sa == 200 and sb == 200:
            pa, pb = set(ra["partitions"]), set(rb["partitions"])
            if pa and pb and not pa & pb and pa | pb == set(range(partitions)):
                return pa
        for w in (a, b):
            if not w.alive():
                raise AssertionError(f"worker {w.index} exited:\n{w.log_text()[-4000:]}")
        time.sleep(0.25)
    raise AssertionError(f"workers never split the partitions:\n{a.log_text()[-3000:]}")
