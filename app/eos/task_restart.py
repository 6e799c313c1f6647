"""Which partition tasks a rebalance keeps, starts again or starts: the transactional producers
follow the assignment (``manager.py`` calls :func:`restart_tasks` from Faust's ``on_rebalance``)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Set

from app.eos.lifecycle import TaskLife

log = logging.getLogger(__name__)


async def restart_tasks(
    life: TaskLife, wanted: Set[int], generation: int, last_generation: int | None
) -> None:
    """Drop the tasks of partitions no longer ``wanted``, start the newly wanted ones, and start
    every kept one again when a consumer generation passed without this worker (``generation``
    more than one past ``last_generation``, the last one it took part in)."""
    tasks = life.tasks
    for p in sorted(set(tasks) - wanted):
        await life.drop(tasks[p])
    if last_generation is not None and generation > last_generation + 1 and tasks:
        # A generation passed without this worker (its session expired): another member may
        # have owned the partitions kept here meanwhile and fenced their producers, which
        # would fail at the next commit and cost one more rebalance. Start them again.
        log.warning(
            "consumer generation %d follows %d: partitions %s may have had another owner "
            "meanwhile; starting their transactional producers again",
            generation,
            last_generation,
            sorted(tasks),
        )
        for p in sorted(tasks):
            await life.drop(tasks[p])
    to_start = [p for p in sorted(wanted) if p not in tasks]
    if to_start:
        log.info("starting transactional producers for partitions %s", to_start)
        started = time.monotonic()
        await asyncio.gather(*(life.start(p) for p in to_start))
        log.info(
            "transactional producers ready for %d partitions in %.2fs",
            len(to_start),
            time.monotonic() - started,
        )
