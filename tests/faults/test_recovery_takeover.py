"""Takeovers of partitions with large changelogs (issue 18): a recovery must end only when every
committed changelog record below the end has been applied to the store, never on the consumer's
position.

Faust's recovery loop, after two empty 5 s waits of its queue, declares every active partition
whose consumer *position* has reached the end recovered ("Aborted tx until highwater"), with its
records fetched but not yet applied; the store then stayed empty and every repeat of a
taken-over id went out again. Its count of empty waits was never reset by a recovery's start,
so a worker that sat idle ran the check 0-5 s into its next takeover. The bulk restorer reads
every partition now, and Faust's consumer waits at the end of each one it restores: to Faust's
loop every restore looks complete from the start.

- F16 drives that moment: the fault point ``restoring=hold`` keeps each partition's first
  fetch from the restorer for 12 s (more than two waits), so the restore waits while Faust's
  consumer is at the end and its queue is empty. With Faust's loop back in place of the
  adapter's (``recovery/faust_adapter.py``, ``_slurp_changelogs``), or a partition counted as
  restored when its restore starts (``recovery/bulk.py``), the worker reports ready while a
  restore is held and the store check fails.
- F17 is the way it was seen: a survivor idle for more than two waits takes over partitions
  with large changelogs (kill -9 of the other worker), then a worker with a wiped data dir
  takes half of them back after idle time too and, idle again, takes over the rest when the
  other dies; every event is then sent again. With a standby replica the takeovers promote
  standby copies instead (the second one a copy that followed its changelog from nothing).

All check the store before the events go again (``ids_held`` per partition against the ids
the changelog holds, and lookups of ids), then the clean topic: each id exactly once.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time

import pytest

from scripts.streams import build_stream, produce
from tests.faults.conftest import SCALE, Reliability
from tests.faults.takeover_support import (
    assert_store_holds,
    ids_by_partition,
    one_worker_processed,
    send_again_and_verify,
    wait_owning,
    wait_split,
)
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.faults


#: More than two of the recovery queue's 5 s waits, so Faust's count of empty waits is high.
IDLE_SECONDS = 12.0


def test_f16_changelog_records_in_transit_past_two_recovery_waits(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    partitions = 2
    stream = build_stream(40_000 * SCALE, 0.0, seed=61)
    expected = ids_by_partition(stream, partitions)
    a = one_worker_processed(broker, names, workers, stream, partitions)
    a.kill(signal.SIGKILL)
    # A new owner with no local state: it restores both partitions from the changelog, and
    # the first fetch of each reaches the restorer 12 s late.
    b = Worker(
        broker,
        names,
        index=1,
        partitions=partitions,
        extra_env={"DEDUPE_FAULT_INJECTION": "restoring=hold@1"},
    )
    workers.append(b)
    b.start()
    deadline = time.monotonic() + 120
    while "fault injection: holding" not in b.log_text():
        assert b.alive(), b.log_text()[-4000:]
        assert time.monotonic() < deadline, "the hold never fired: the test proved nothing"
        time.sleep(0.25)
    # Checked as soon as the worker says its state is recovered: a recovery ended while the
    # restore was held shows here as ids missing from the store.
    wait_owning(b, {0, 1})
    assert_store_holds(b, {0, 1}, expected, seed=1)
    assert "releasing" in b.log_text(), "ready while the restore was held"
    send_again_and_verify(
        broker,
        names,
        workers,
        stream,
        partitions,
        reliability,
        "F16 takeover: changelog records in transit past two recovery waits, then every event "
        "again",
        1,
    )


@pytest.mark.parametrize("standbys", [0, 1])
def test_f17_takeovers_of_large_changelogs_after_idle_time(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability, standbys: int
) -> None:
    """With ``standbys=1`` each worker also follows the other's changelog partitions, and the
    takeover promotes them: the standby path must not have skipped a record either."""
    partitions = 4
    stream = build_stream(40_000 * SCALE, 0.0, seed=62)
    expected = ids_by_partition(stream, partitions)
    env = {"DEDUPE_STANDBY_REPLICAS": str(standbys)}
    a, b = (Worker(broker, names, index=i, partitions=partitions, extra_env=env) for i in range(2))
    workers.extend([a, b])
    a.start()
    a.wait_ready()
    b.start()
    b.wait_ready()
    wait_split(a, b, partitions)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, timeout=300, workers=workers)
    time.sleep(IDLE_SECONDS)  # both idle: each recovery queue counts its empty waits
    a.kill(signal.SIGKILL)  # b takes over a's partitions: about half the ids to rebuild
    wait_owning(b, set(range(partitions)))
    assert_store_holds(b, set(range(partitions)), expected, seed=2)
    time.sleep(IDLE_SECONDS)
    # a comes back with a wiped data dir and takes about half back: its recovery rebuilds them
    # from the changelog too, and b gives them up.
    shutil.rmtree(a.data_dir)
    a.start()
    a.wait_ready()
    owned_a = wait_split(a, b, partitions)
    assert_store_holds(a, owned_a, expected, seed=3)
    time.sleep(IDLE_SECONDS)
    # b dies: a takes over the rest, rebuilt from the changelog, or, with a standby, from the
    # standby copy a has followed since it rejoined (from nothing: a long catch-up).
    b.kill(signal.SIGKILL)
    wait_owning(a, set(range(partitions)))
    assert_store_holds(a, set(range(partitions)), expected, seed=4)
    b.start()
    b.wait_ready()
    wait_split(a, b, partitions)
    send_again_and_verify(
        broker,
        names,
        workers,
        stream,
        partitions,
        reliability,
        f"F17 takeovers of large changelogs after idle time (kill -9 x2, wiped rejoin; "
        f"{standbys} standby), then every event again",
        3,
    )
