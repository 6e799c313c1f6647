"""A record is never skipped: the gap check of the batch path and the stall watchdog.

Faust's consumer does not deliver every partition gap-free: around recovery and seeks it drops
records it believes it already delivered ("DROPPED MESSAGE ROFF"), streams skip records of
another generation, and a flow or generation change in the middle of a batch drops the rest,
while the underlying consumer's position has moved past them. Committing after such a skip
would lose the skipped record.

- Each task knows the next offset of each source partition (``Task.positions``). A record
  above it leaves a gap, and :func:`gap_checked` asks the broker (read_committed) whether the
  gap holds records: commit markers and aborted records are fine, a real record means the
  partition is re-read from its committed offset.
- When no later record comes to reveal the gap, the partition stalls for good (a broker
  restart can leave it so; fault tests F6 and F14). :class:`StallWatchdog` seeks such a
  partition back, and if that does not help within the same time, rejoins the group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable

from aiokafka.errors import ConsumerStoppedError, KafkaError
from aiokafka.structs import TopicPartition

from app.eos.batch import SourceRecord
from app.eos.broker import BrokerReader
from app.eos.task import Task, TaskState

log = logging.getLogger(__name__)


async def gap_checked(
    broker: BrokerReader, fail: Callable[[Task, str], None], task: Task, message: SourceRecord
) -> bool:
    """A record above the expected offset: True when the gap before it holds no committed
    record; otherwise (or without an answer) ``fail`` the task and False."""
    tp = TopicPartition(message.topic, message.partition)
    expected = task.positions[tp]
    try:
        missed = await broker.first_committed_record(tp, expected, message.offset)
    except (KafkaError, TimeoutError, OSError) as exc:
        fail(
            task,
            f"could not learn what lies between offsets {expected} and {message.offset} "
            f"of {tp.topic}-{tp.partition} (the broker did not answer: {exc!r})",
        )
        return False
    if missed is None:
        return True
    fail(
        task,
        f"the consumer skipped record {missed} of {tp.topic}-{tp.partition} "
        f"(expected offset {expected}, got {message.offset})",
    )
    return False


class StallWatchdog:
    """When no record of a source partition reached the agent for ``limit`` seconds while no
    rebalance or recovery runs (``busy``), and the broker holds a committed record at or after
    the task's position, seek the consumer back to that position (records already processed
    are skipped by the sequence check); if that does not help within the same time, rejoin."""

    def __init__(
        self,
        limit: float,
        broker: BrokerReader,
        busy: Callable[[], bool],
        seek: Callable[[TopicPartition, int], Awaitable[None]],
        rejoin: Callable[[], None],
    ) -> None:
        self.limit = limit
        self._broker = broker
        self._busy = busy
        self._seek = seek
        self._rejoin = rejoin
        #: Partitions un-stalled so far (status).
        self.stalls = 0

    async def check(self, tasks: Iterable[Task], quiet_since: float) -> None:
        """One round over every task's source partitions (``quiet_since``: when the consumer
        was last busy; no partition counts as quiet before)."""
        now = time.monotonic()
        for task in list(tasks):
            for tp, position in list(task.positions.items()):
                since = max(task.delivered_at.get(tp, quiet_since), quiet_since)
                if task.state is not TaskState.RUNNING or now - since < self.limit:
                    continue
                try:
                    readable = await self._broker.first_record_from(tp, position)
                except ConsumerStoppedError:
                    # The broker reader was closed: the worker is stopping (the manager's
                    # on_stop closes it while this task may still be running). Nothing to
                    # un-stall; a crash here would end a graceful stop with exit 1.
                    return
                except (KafkaError, TimeoutError, OSError) as exc:
                    log.warning("stall check of %s-%d failed (%r)", tp.topic, tp.partition, exc)
                    continue
                if readable is not None and not self._busy():
                    await self._unstall(task, tp, position, readable, now - since)
                task.delivered_at[tp] = time.monotonic()

    async def _unstall(
        self, task: Task, tp: TopicPartition, position: int, readable: int, idle: float
    ) -> None:
        self.stalls += 1
        if tp not in task.stall_seeks:
            log.warning(
                "%s-%d: no record reached the agent for %.0fs although committed record %d is "
                "on the broker (next to process: %d): the consumer moved past records without "
                "delivering them; seeking it back to %d",
                tp.topic,
                tp.partition,
                idle,
                readable,
                position,
                position,
            )
            task.stall_seeks.add(tp)
            await self._seek(tp, position)
            return
        log.error(
            "%s-%d: still no record delivered %.0fs after seeking back to %d: rejoining the "
            "group so the partition is assigned and read again",
            tp.topic,
            tp.partition,
            idle,
            position,
        )
        task.stall_seeks.discard(tp)
        self._rejoin()
