"""Where each task starts reading after a rebalance: the group's committed offset, raised to
the source offsets its store holds when the broker read back a stale committed offset.

Both commit in the same transaction (the offsets with ``send_offsets_to_transaction``, the
store's copy as a changelog record), so they only differ when the broker returns a stale
committed offset (a single broker killed with kill -9 can; fault test F7); re-reading from
there would forward ids a second time.

Or when the store holds a transaction the broker did not commit after all: its commit was
acknowledged, the store applied it, and the broker rolled it back (a broker restart can; fault row
F8b). Raising the start then skips records that were never forwarded, and the store, which holds
their ids, would drop them as repeats anyway. So before the recovery, a raise is confirmed first:
the store's source-offsets record must be committed in the changelog. When it is not, the
partition's state is rebuilt from the changelog (:func:`confirm_stored_offsets`), which holds
exactly the committed transactions.

Before any of this the task's changelog partition must be settled (no transaction open): one
the broker left open for good is committed through (``hanging.py``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping

from aiokafka.structs import TopicPartition

from app.eos.broker import BrokerReader
from app.eos.task import Task, TaskState
from tables.protocol import SourceOffsetStore

log = logging.getLogger(__name__)


async def assign_start_positions(
    broker: BrokerReader,
    tasks: Mapping[int, Task],
    source_topics: Iterable[str],
    partitions: list[int],
    changelog_topic: str | None,
    end_hanging: Callable[[list[TopicPartition]], Awaitable[object]] | None = None,
) -> None:
    """Set each task's next offsets (``Task.positions``) for ``partitions``: where Faust seeks
    every assigned partition after a rebalance, its committed offset (the log start for a
    partition the group never committed). ``end_hanging(tps)`` is called with the changelog
    partitions still holding an open transaction a transaction timeout after the producers
    started (app/eos/hanging.py)."""
    if changelog_topic is not None:
        # Every transaction of task p writes changelog partition p (at least its source-offsets
        # record), and only task p's producer writes there. Its producer was just initialised,
        # which fences older ones, so an open transaction there is an older one the broker has
        # not finished (a single broker's kill -9 leaves one; its output may still commit).
        # Reading committed offsets, or recovering the changelog, before it settles would
        # re-read records whose output then commits.
        changelogs = [TopicPartition(changelog_topic, p) for p in partitions]
        if end_hanging is None:
            await broker.wait_until_settled(changelogs)
        else:
            patience = broker.settings.transaction_timeout
            hanging = await broker.wait_until_settled(changelogs, give_up_after=patience)
            if hanging:
                await end_hanging(hanging)
                live = {p for p, task in tasks.items() if task.state is TaskState.RUNNING}
                await broker.wait_until_settled([tp for tp in changelogs if tp.partition in live])
    tps = [TopicPartition(t, p) for t in sorted(source_topics) for p in partitions]
    committed = await broker.committed_offsets_retrying(tps)
    starts = await broker.start_offsets(tps, committed)
    now = time.monotonic()
    for p in partitions:
        task = tasks.get(p)
        if task is None:
            continue  # the worker stopped meanwhile (on_stop dropped every task)
        task.positions = {tp: off for tp, off in starts.items() if tp.partition == p}
        task.delivered_at = dict.fromkeys(task.positions, now)
        task.stall_seeks.clear()
    log.info(
        "assigned partitions %s; starting at offsets %s",
        partitions,
        {f"{tp.topic}-{tp.partition}": off for tp, off in sorted(starts.items())},
    )


def positions_to_raise(task: Task, stored: Mapping[str, int]) -> dict[TopicPartition, int]:
    """The task's source partitions whose stored offset (by topic) is past its position."""
    return {
        tp: stored[tp.topic]
        for tp, position in task.positions.items()
        if stored.get(tp.topic, -1) > position
    }


async def confirm_stored_offsets(
    broker: BrokerReader,
    tasks: Mapping[int, Task],
    store: SourceOffsetStore,
    changelog_topic: str,
    partitions: list[int],
    rebuild: Callable[[int], None],
) -> list[int]:
    """Before the recovery, after :func:`assign_start_positions` (the changelog is settled): for
    each task the store would raise, check that the transaction the store's source offsets came
    from committed (its record is in the changelog, read committed), and ``rebuild`` the state
    of any partition where it did not. Returns the partitions rebuilt."""
    rebuilt = []
    for p in partitions:
        task = tasks.get(p)
        if task is None:
            continue
        stored = store.source_offsets(p)
        if not positions_to_raise(task, stored):
            continue
        at = store.source_offsets_at(p)
        if at is None:
            continue  # restored from the changelog: committed
        tp = TopicPartition(changelog_topic, p)
        try:
            found = await broker.first_committed_record(tp, at, at + 1)
        except TimeoutError:
            found = None  # unconfirmed: rebuilding is always right, only slower
        if found == at:
            continue
        log.error(
            "partition %d: the store holds a transaction that did not commit: its source "
            "offsets %s are past the group's committed offsets %s, but their record (%s-%d at "
            "offset %d) is not committed in the changelog (the broker rolled back a commit it "
            "had acknowledged). Rebuilding the partition's state from the changelog and "
            "starting at the group's offsets",
            p,
            stored,
            {src.topic: off for src, off in task.positions.items()},
            changelog_topic,
            p,
            at,
        )
        rebuild(p)
        rebuilt.append(p)
    return rebuilt


async def raise_positions(task: Task, raised: Mapping[TopicPartition, int]) -> bool:
    """Start ``task`` at the ``raised`` offsets and put them in an open transaction (with no
    records), so the group's offsets catch up at the next commit even when no new record
    arrives. False when the task no longer runs."""
    async with task.lock:
        if task.state is not TaskState.RUNNING or task.producer is None:
            return False
        for tp, later in raised.items():
            log.warning(
                "partition %d: the group's committed offset for %s-%d is %d, but the last "
                "transaction in the changelog committed up to %d: starting there (the broker "
                "returned a stale committed offset)",
                task.partition,
                tp.topic,
                tp.partition,
                task.positions[tp],
                later,
            )
            task.positions[tp] = later
            task.offsets[tp] = later
        if not task.in_transaction:
            await task.producer.begin_transaction()
            task.in_transaction = True
    return True


async def raise_to_stored_offsets(tasks: Iterable[Task], store: SourceOffsetStore) -> bool:
    """After the recovery (``store`` holds the committed changelog), before records flow: raise
    each task's start to the source offsets ``store`` holds. True when any task was raised (its
    open transaction should commit soon)."""
    any_raised = False
    for task in list(tasks):
        raised = positions_to_raise(task, store.source_offsets(task.partition))
        if raised and await raise_positions(task, raised):
            any_raised = True
    return any_raised
