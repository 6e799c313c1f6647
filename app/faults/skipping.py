"""The ``processed`` fault point and its ``skip-fetched`` action (``app/faults/injection.py``),
as a wrapper of the batch handler: the per-record loop (``app/eos/batch.py``) knows nothing of
them."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiokafka.structs import TopicPartition

if TYPE_CHECKING:
    from app.eos.batch import BatchHandler, SourceRecord
    from app.eos.task import Task
    from app.faults.injection import FaultPlan

log = logging.getLogger(__name__)

#: Where ``skip-fetched`` finds a partition's end and moves its consumer.
EndOf = Callable[[TopicPartition], Awaitable[int]]
Seek = Callable[[TopicPartition, int], Awaitable[None]]


class SkippingHandler:
    """The batch handler with the ``processed`` point: until the point fires, each record goes
    to the handler on its own, so that the point is reached right after the record that counts
    as processed (its task's position moved past it) and the rest of its batch can be dropped."""

    def __init__(
        self,
        plan: FaultPlan,
        skipping: dict[TopicPartition, int],
        handler: BatchHandler,
        tasks: dict[int, Task],
        end_of: EndOf,
        seek: Seek,
    ) -> None:
        self.plan = plan
        #: Records below these offsets are not delivered (shared with the fault points).
        self.skipping = skipping
        self.handler = handler
        self.tasks = tasks
        self.end_of = end_of
        self.seek = seek

    async def handle(self, messages: list[SourceRecord], generation_id: int) -> None:
        first = messages[0]
        tp = TopicPartition(first.topic, first.partition)
        skip_to = self.skipping.get(tp)
        if skip_to is not None:  # as if the consumer had never delivered them
            messages = [m for m in messages if m.offset >= skip_to]
            if not messages:
                return
        plan = self.plan
        if plan.fired or plan.point != "processed":
            await self.handler(messages, generation_id)
            return
        for message in messages:
            if message.offset < self.skipping.get(tp, -1):
                return
            task = self.tasks.get(tp.partition)
            before = None if task is None else task.positions.get(tp)
            await self.handler([message], generation_id)
            task = self.tasks.get(tp.partition)
            after = None if task is None else task.positions.get(tp)
            if after != message.offset + 1 or before == after:
                continue  # not processed (not ours any more, delivered again, a gap)
            if plan.reach("processed") == "skip-fetched":
                await self._skip_fetched(tp)

    async def _skip_fetched(self, tp: TopicPartition) -> None:
        """Move the consumer of ``tp`` to its end and drop the records in between that it
        already fetched, as if it had never delivered them (until the watchdog seeks back)."""
        end = await self.end_of(tp)
        self.skipping[tp] = end
        log.warning(
            "fault injection: the consumer skips %s-%d to offset %d", tp.topic, tp.partition, end
        )
        await self.seek(tp, end)
