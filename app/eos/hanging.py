"""End a transaction the broker left open on a task's own changelog partition (a hanging
transaction), by committing through it.

How one comes about: a broker's controlled shutdown leaves its partitions without a leader;
a transaction coordinator finishing a commit (or a rollback) at that moment finds no leader to
write the markers to, skips them as "likely deleted" and records the transaction as finished
(the flaw named in review of KAFKA-5202). The records stay without a marker, the partition's
last stable offset stays where they begin, and every read_committed reader stops there: left
alone, the worker's recovery would wait on it for good (fault row F8c).

Only task ``p``'s producer writes changelog partition ``p``, and when the partition is
assigned its producer has no transaction open and the broker has finished every earlier one of
its transactional id: a new producer's ``InitProducerId`` completes or aborts them (markers
written) before it answers, and a kept one committed at the revoke. So a transaction still open
there a transaction timeout later is one the coordinator forgot: no marker will ever come from
the broker. The task's producer then commits a transaction with no record that adds the
changelog partition and every partition the task writes (clean, dead-letter and repartition
topics): its marker ends the transaction its own producer id left open on each of them (a
marker of the same or a newer epoch ends it; fault test F8c, on a real broker).

Why commit, whatever the coordinator had decided: the forgotten transaction's records then
count on every partition that still holds them open, together. Its changelog records put its
ids in the store (the recovery replays them), so when the group's offsets do not hold the
transaction its records are read again and dropped as repeats, and its clean records are the
only copies. Aborting instead would lose the ids of a transaction whose clean records already
committed elsewhere (a cluster that wrote some markers), and forward those events twice.

Left open: a crash between adding the partitions and the commit leaves the coordinator to abort
this transaction, which ends the forgotten one as aborted, on the same partitions together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping

from aiokafka.structs import TopicPartition

from app.eos.producer import commit_markers
from app.eos.task import Task, TaskState

log = logging.getLogger(__name__)


def written_by(
    partition: int, changelogs: Iterable[str], sinks: Iterable[str], partitions: int
) -> list[TopicPartition]:
    """Every partition task ``partition``'s transactions may write: its partition of each
    changelog topic, and every partition (of ``partitions``) of the topics it forwards to."""
    return [TopicPartition(t, partition) for t in changelogs] + [
        TopicPartition(t, q) for t in sinks for q in range(partitions)
    ]


async def commit_through(
    tasks: Mapping[int, Task],
    hanging: list[TopicPartition],
    written_by: Callable[[int], list[TopicPartition]],
    failed: Callable[[Task, BaseException], object],
) -> list[int]:
    """Commit through the ``hanging`` changelog partitions with their tasks' producers (with
    every partition ``written_by(p)``); ``failed(task, exc)`` when that transaction fails.
    Returns the partitions committed through."""
    done = []
    for p in sorted({tp.partition for tp in hanging}):
        task = tasks.get(p)
        if task is None:
            continue
        async with task.lock:
            if task.state is not TaskState.RUNNING or task.producer is None:
                continue
            if task.in_transaction:
                continue  # records flow already: its commit writes the markers
            open_here = [tp for tp in hanging if tp.partition == p]
            log.error(
                "partition %d: a transaction stays open on %s after this partition's producer "
                "(transactional id %s) started, which finishes every transaction the broker "
                "still knows: the broker dropped its markers (a hanging transaction, e.g. "
                "after a single broker's restart). Committing through it on every partition "
                "the task writes (docs/operations.md, a hanging transaction)",
                p,
                ", ".join(f"{tp.topic}-{tp.partition}" for tp in open_here),
                task.transactional_id,
            )
            try:
                await commit_markers(task.producer, sorted({*open_here, *written_by(p)}))
            except Exception as exc:
                failed(task, exc)
                continue
            done.append(p)
    return done
