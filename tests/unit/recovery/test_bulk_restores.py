"""The restores a recovery queues (recovery/bulk.py): one after the other, each counted restored
once its store has compacted (while the next one restores), retried after a failure with a
growing wait, a newer recovery replacing an older one's queue, and a restore that keeps failing
past its limit stopping with what it waited for."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from recovery import bulk, restore, retry
from recovery.bulk import BulkRestores
from recovery.retry import GaveUp

A = TopicPartition("app-seen_ids-changelog", 0)
B = TopicPartition("app-seen_ids-changelog", 1)


class Restorer:
    """Fails each partition's first ``failures[tp]`` restores, then restores it."""

    def __init__(self, failures: dict[TopicPartition, int]) -> None:
        self.failures = dict(failures)
        self.calls: list[tuple[TopicPartition, int]] = []

    async def restore(self, store: Any, tp: TopicPartition, end: int, still_wanted: Any) -> bool:
        self.calls.append((tp, end))
        if self.failures.get(tp, 0) > 0:
            self.failures[tp] -= 1
            raise OSError("connection refused")
        return bool(still_wanted())


class Store:
    """Says it is compacting for its first ``polls`` questions (recovery/restore.py's
    ``BulkTarget.compacting``, the part the queue's wait uses)."""

    def __init__(self, polls: int = 0) -> None:
        self.polls = polls
        self.asked = 0

    def compacting(self, partition: int) -> bool:
        self.asked += 1
        return self.asked <= self.polls


def run_until(restores: BulkRestores, done: asyncio.Event) -> None:
    """Run the queue until ``done`` is set (by the ``restored`` callback)."""

    async def main() -> None:
        stop = False
        task = asyncio.ensure_future(restores.run(lambda: stop))
        try:
            await asyncio.wait_for(done.wait(), timeout=5)
        finally:
            stop = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())


def test_each_queued_partition_is_restored_and_a_failure_is_retried_after_a_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    waits: list[float] = []
    real_sleep = asyncio.sleep

    async def sleep(seconds: float) -> None:
        waits.append(seconds)
        await real_sleep(0)

    monkeypatch.setattr(bulk.asyncio, "sleep", sleep)
    restorer = Restorer({A: 2})
    restored: list[tuple[TopicPartition, int]] = []
    done = asyncio.Event()

    def on_restored(tp: TopicPartition, highwater: int) -> None:
        restored.append((tp, highwater))
        if len(restored) == 2:
            done.set()

    restores = BulkRestores(
        restorer,  # type: ignore[arg-type]
        highwater={A: 9, B: 4}.get,
        store=lambda tp: Store(),  # type: ignore[arg-type,return-value]
        restored=on_restored,
    )
    assert restores.start_round([B, A]) == [A, B]
    run_until(restores, done)
    assert restorer.calls == [(A, 10), (A, 10), (A, 10), (B, 5)]
    assert waits == [1.0, 2.0]
    assert restored == [(A, 9), (B, 4)] and restores.pending == set()


def test_a_restore_failing_past_the_limit_raises_what_it_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [0.0]

    async def sleep(seconds: float) -> None:
        now[0] += seconds

    monkeypatch.setattr(bulk.asyncio, "sleep", sleep)
    monkeypatch.setattr(retry.time, "monotonic", lambda: now[0])
    restores = BulkRestores(
        Restorer({A: 10_000}),  # type: ignore[arg-type]
        highwater={A: 9}.get,
        store=lambda tp: Store(),  # type: ignore[arg-type,return-value]
        restored=lambda tp, hw: None,
    )
    restores.start_round([A])

    async def main() -> None:
        await asyncio.wait_for(restores.run(lambda: False), timeout=5)

    with pytest.raises(GaveUp, match=r"restoring app-seen_ids-changelog-0: failed \d+ times"):
        asyncio.run(main())
    assert now[0] >= retry.RESTORE_LIMIT_SECONDS


def test_a_partition_counts_as_restored_once_compacted_and_the_next_restores_meanwhile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """RocksDB compacts in its own threads: the wait for A's compaction must not hold B's
    restore (every partition's compaction added to the time to ready in turn)."""
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    stores = {A: Store(polls=20), B: Store()}
    restorer = Restorer({})
    restored: list[tuple[TopicPartition, int, list[tuple[TopicPartition, int]]]] = []
    done = asyncio.Event()

    def on_restored(tp: TopicPartition, highwater: int) -> None:
        restored.append((tp, stores[tp].asked, list(restorer.calls)))
        if len(restored) == 2:
            done.set()

    restores = BulkRestores(
        restorer,  # type: ignore[arg-type]
        highwater={A: 9, B: 4}.get,
        store=stores.__getitem__,  # type: ignore[arg-type]
        restored=on_restored,
    )
    restores.start_round([A, B])
    run_until(restores, done)
    # B was restored while A still compacted; A counted only after its 20 "still compacting".
    assert restored == [(B, 1, [(A, 10), (B, 5)]), (A, 21, [(A, 10), (B, 5)])]
    assert restores.pending == set()


def test_a_newer_round_replaces_the_wait_for_a_compaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A rebalance while A compacts: the older wait ends, the newer round restores A again
    (nothing left to write) and A counts as restored once, with the newer end."""
    monkeypatch.setattr(restore, "COMPACTION_POLL", 0.001)
    waiting, restored_again = asyncio.Event(), asyncio.Event()

    class Watched(Store):
        def compacting(self, partition: int) -> bool:
            if self.asked == 5:
                waiting.set()  # the first round's wait is on
            return super().compacting(partition)

    class Again(Restorer):
        async def restore(self, *args: Any) -> bool:
            done = await super().restore(*args)
            if len(self.calls) == 2:
                restored_again.set()
            return done

    store = Watched(polls=10_000)
    restorer = Again({})
    highwater = {A: 9}
    restored: list[tuple[TopicPartition, int]] = []
    done = asyncio.Event()

    def on_restored(tp: TopicPartition, hw: int) -> None:
        restored.append((tp, hw))
        done.set()

    restores = BulkRestores(
        restorer,  # type: ignore[arg-type]
        highwater=highwater.get,
        store=lambda tp: store,  # type: ignore[arg-type,return-value]
        restored=on_restored,
    )
    restores.start_round([A])

    async def main() -> None:
        task = asyncio.ensure_future(restores.run(lambda: False))
        try:
            await asyncio.wait_for(waiting.wait(), timeout=5)
            highwater[A] = 12  # the newer recovery's end
            restores.start_round([A])
            await asyncio.wait_for(restored_again.wait(), timeout=5)
            store.polls = store.asked  # the compaction ends
            await asyncio.wait_for(done.wait(), timeout=5)
            await asyncio.sleep(0.05)  # no second "restored" from the older wait
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    assert restorer.calls == [(A, 10), (A, 13)]
    assert restored == [(A, 12)]
