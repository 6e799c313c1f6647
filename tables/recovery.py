"""Changelog recovery that ends a partition only when its committed records are in the store.

Faust rebuilds a table partition by reading its changelog into a queue and applying the records
in ``Recovery._slurp_changelogs``. A partition counts as recovered when the last record applied
reaches the partition's end (its "highwater": under exactly-once, the last stable offset minus
one). A transactional changelog ends with a commit marker that a read_committed consumer never
delivers, and may end with aborted records, so that end is never *reached*; Faust's answer was,
after two empty 5 s waits of the queue, to declare recovered every partition whose consumer
*position* was at the end ("Aborted tx until highwater"). The position says what was fetched,
not what was applied: records fetched but not yet through the queue were then skipped, the
store stayed empty, and every repeat of a taken-over id went out again (fault rows F16 and
F17; Faust's count of empty waits is not reset by a recovery's start, so an idle worker can
run the check at once in its next takeover). :class:`TransactionalRecovery` runs the same loop
with one rule instead:

- A partition is recovered only when the broker says (read_committed) that no committed record
  lies between the last record applied and the end. That question is asked for every partition
  short of its end when a recovery starts (a promoted standby copy holds the record before the
  last commit marker), after the record one below the end (the usual case: the end is the last
  transaction's commit marker) and after each empty 5 s wait of the queue.
- When committed records remain after such a wait and the consumer's position is already past
  the first of them, they were fetched but never reached the recovery: the partition is read
  again from the record after the last one applied (a record applied twice is skipped by its
  offset, so this is always safe).

Standby partitions never end (they follow their changelog), so the rule is for active ones.

With a :class:`~tables.restore.Restorer` (the worker's default, ``DEDUPE_BULK_RESTORE``), Faust's
loop no longer reads the active partitions of our tables at all: when a recovery starts, Faust's
consumer is moved to their end and the restorer reads each one into its store in whole write
batches (``tables/restore.py``); a partition is recovered when its restore reaches the end.
Standby partitions of our tables are followed in bulk too (``tables/follow.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from time import monotonic
from typing import Any

from aiokafka.structs import TopicPartition
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.types import TP, EventT
from faust.utils.tracing import finish_span
from mode import Service

from tables.follow import Follower
from tables.restore import BulkTarget, Restorer

log = logging.getLogger(__name__)

#: ``(tp, start, end)`` -> offset of the first record a read_committed reader sees in
#: ``[start, end)``, or None. Raises when the broker does not answer.
FirstCommittedRecord = Callable[[TP, int, int], Awaitable[int | None]]

#: How long the recovery loop waits for a changelog record before it looks at the partitions
#: still short of their end (Faust's value).
IDLE_WAIT_SECONDS = 5.0
#: The wait before a failed restore of a partition is tried again, doubled after each failure
#: up to :data:`RETRY_MAX_SECONDS`.
RETRY_FIRST_SECONDS = 1.0
RETRY_MAX_SECONDS = 30.0


def retry_delay(delay: float) -> float:
    """The wait before the next try, after one of ``delay`` seconds failed again."""
    return min(delay * 2, RETRY_MAX_SECONDS)


class TransactionalRecovery(Recovery):  # type: ignore[misc]
    """Faust's recovery service, ending active partitions on records applied (module doc)."""

    #: Where the committed records of a changelog partition lie (handed in by the app's
    #: factory through :func:`use_broker_reader`). Without it no partition ends before its
    #: last record was applied.
    first_committed_record: FirstCommittedRecord | None = None
    #: Restores the active partitions of our tables in bulk (handed in by the factory through
    #: :func:`use_restorer`); None: Faust's loop reads them.
    restorer: Restorer | None = None
    #: Follows the standby partitions of our tables in bulk (:func:`use_restorer` too); None:
    #: Faust's loop follows them.
    follower: Follower | None = None
    # Faust's attributes that mypy cannot type from its code:
    _last_active_event_processed_at: float | None
    _standbys_span: Any

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The active partitions the restorer is to read, for the recovery numbered
        #: ``_bulk_round`` (a new recovery replaces them and stops the one in progress).
        self._bulk_round = 0
        self._bulk_pending: set[TP] = set()
        self._bulk_wanted = asyncio.Event()
        #: The standby partitions of this rebalance the follower takes, as Faust adds them.
        self._standbys_next: dict[TP, BulkTarget] = {}

    async def on_stop(self) -> None:
        await super().on_stop()
        if self.restorer is not None:
            await self.restorer.close()
        if self.follower is not None:
            await self.follower.close()

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Faust's, and the follower then follows exactly this assignment's standby partitions
        of our tables (before any active restore starts: a promoted one is no longer followed)."""
        self._standbys_next = {}
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        if self.follower is not None and generation_id == self.app.consumer_generation_id:
            self.follower.follow(
                {TopicPartition(tp.topic, tp.partition): s for tp, s in self._standbys_next.items()}
            )

    def add_standby(self, table: Any, tp: TP) -> None:
        """A standby partition of one of our tables goes to the follower; Faust's consumer,
        which paused it at the rebalance, never resumes it. Others: Faust's standby."""
        if self.follower is not None and hasattr(table.data, "begin_bulk"):
            self.tp_to_table[tp] = table
            self._standbys_next[tp] = table.data
            return
        super().add_standby(table, tp)

    @Service.task  # type: ignore[untyped-decorator]
    async def _follow_standbys(self) -> None:
        if self.follower is not None:
            await self.follower.run(lambda: bool(self.should_stop))

    def _set_recovery_started(self) -> None:
        """Faust's, and the end signal is cleared here, when a recovery starts, instead of at
        every turn of the loop below: the restorer may end a recovery between two turns."""
        super()._set_recovery_started()
        self.signal_recovery_end.clear()

    @Service.task  # type: ignore[untyped-decorator]
    async def _slurp_changelogs(self) -> None:
        """Faust's loop (``faust/tables/recovery.py``), with the end rule of the module doc."""
        queue = self.tables.changelog_queue
        while not self.should_stop:
            try:
                try:
                    event: EventT = await asyncio.wait_for(queue.get(), timeout=IDLE_WAIT_SECONDS)
                except TimeoutError:
                    if self.should_stop:
                        return
                    if self.in_recovery:
                        for tp in sorted(self.active_remaining()):
                            await self.settle(tp, idle=True)
                    self._maybe_signal_recovery_end()
                    continue
                await self._apply(event)
                self._maybe_signal_recovery_end()
                self._maybe_signal_standbys_ready()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("Error in recovery %r", exc, exc_info=True)

    async def _seek_offsets(
        self, consumer: Any, tps: set[TP], offsets: Counter[TP], title: str
    ) -> None:
        """Faust's seek before reading; then the active partitions of our tables go to the
        restorer (Faust's consumer waits at their end), and any other active partition already
        short of its end by commit markers alone (no record will come to trigger the check)
        ends here, instead of after a 5 s wait."""
        await super()._seek_offsets(consumer, tps, offsets, title)
        if offsets is not self.active_offsets:
            return
        bulk = self._hand_to_restorer(sorted(self.active_remaining()))
        if bulk:
            # Faust's consumer must not read them as well: it waits at their end.
            await consumer.seek_wait({tp: self.active_highwaters[tp] + 1 for tp in bulk})
        for tp in sorted(self.active_remaining()):
            if tp not in bulk:
                await self.settle(tp, idle=False)

    def _hand_to_restorer(self, remaining: list[TP]) -> list[TP]:
        """The partitions of ``remaining`` the restorer takes (all of our stores'), queued for
        :meth:`_bulk_restore`, replacing what an earlier recovery queued."""
        self._bulk_round += 1
        self._bulk_pending = set()
        if self.restorer is None:
            return []
        self._bulk_pending = {
            tp
            for tp in remaining
            if self.active_remaining()[tp] > 0 and hasattr(self.tp_to_table[tp].data, "begin_bulk")
        }
        if self._bulk_pending:
            self._bulk_wanted.set()
        return sorted(self._bulk_pending)

    @Service.task  # type: ignore[untyped-decorator]
    async def _bulk_restore(self) -> None:
        """Restore the partitions :meth:`_hand_to_restorer` queued, one after the other; each
        one restored counts as recovered (Faust's recovery ends when all have)."""
        while not self.should_stop:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._bulk_wanted.wait(), timeout=1.0)
            if not self._bulk_wanted.is_set():
                continue
            self._bulk_wanted.clear()
            number, pending = self._bulk_round, sorted(self._bulk_pending)
            for tp in pending:
                delay = RETRY_FIRST_SECONDS
                while number == self._bulk_round and not self.should_stop:
                    if await self._restore_one(tp, number):
                        break
                    # It failed: try again (the store kept a prefix), less often while it keeps
                    # failing, so that a broker that is down is not asked once a second.
                    await asyncio.sleep(delay)
                    delay = retry_delay(delay)

    async def _restore_one(self, tp: TP, number: int) -> bool:
        """Restore ``tp``; True when it is done (or no longer ours to restore)."""
        assert self.restorer is not None
        highwater = self.active_highwaters.get(tp)
        if tp not in self.active_tps or highwater is None:
            return True

        def still_wanted() -> bool:
            return (
                number == self._bulk_round
                and tp in self.active_tps
                and self.active_highwaters.get(tp) == highwater
                and not self.should_stop
            )

        store: BulkTarget = self.tp_to_table[tp].data
        try:
            done = await self.restorer.restore(
                store, TopicPartition(tp.topic, tp.partition), highwater + 1, still_wanted
            )
        except Exception as exc:
            log.error("restoring %s-%d failed (%r); trying again", tp.topic, tp.partition, exc)
            return False
        if done and still_wanted():
            self.active_offsets[tp] = highwater
            self._bulk_pending.discard(tp)
            self._maybe_signal_recovery_end()
        return True

    async def _apply(self, event: EventT) -> None:
        """Buffer one changelog record (applied by whole buffers), as Faust does."""
        now = monotonic()
        tp: TP = event.message.tp
        offset: int = event.message.offset
        active = tp in self.active_tps
        if active:
            offsets = self.active_offsets
            self._active_events_received_at[tp] = now
        elif tp in self.standby_tps:
            offsets = self.standby_offsets
            self._standby_events_received_at.setdefault(tp, now)
        else:
            # Faust fell through here and applied the record to the previous record's table.
            log.warning("recovery: record of %s-%d, which is not assigned, ignored", *tp)
            return
        if tp in self._bulk_pending or tp in self._standbys_next:
            # The restorer reads this partition; a record fetched before it took over (a
            # standby's, just promoted) must not be written over the newer ones it writes.
            return
        table = self.tp_to_table[tp]
        bufsize = self.buffer_sizes.get(tp)
        if bufsize is None:
            size = table.recovery_buffer_size if active else table.standby_buffer_size
            bufsize = self.buffer_sizes[tp] = size
        seen = offsets.get(tp)
        if seen is not None and offset <= seen:
            return  # applied already (read again after a seek)
        offsets[tp] = offset
        buffer = self.buffers[table]
        buffer.append(event)
        await table.on_changelog_event(event)
        if len(buffer) >= bufsize:
            table.apply_changelog_batch(buffer)
            buffer.clear()
            self._last_flush_at = now
        if not active:
            return
        after = monotonic()
        last = self._last_active_event_processed_at
        if last is not None:
            self._processing_times.append(after - last)
            if len(self._processing_times) > self.num_samples_required_for_estimate:
                self._processing_times.popleft()
        self._last_active_event_processed_at = after
        highwater = self.active_highwaters.get(tp)
        if highwater is not None and highwater - offset == 1:
            await self.settle(tp, idle=False)  # the end is one offset away: a marker?

    async def settle(self, tp: TP, *, idle: bool) -> bool:
        """End the recovery of active partition ``tp`` if no committed record lies between
        the last record applied and its end; True when it ended. ``idle``: the queue was empty
        for a whole wait, so a record fetched and not applied by now never reached it."""
        if tp in self._bulk_pending:
            # The restorer reads it and ends it. Asked here, after an idle wait of the queue,
            # it looked skipped (nothing applied, Faust's consumer at the end) and Faust's
            # consumer read the whole partition again beside the restorer, every record of it
            # dropped by :meth:`_apply`: work taken from the restore of every partition whose
            # turn came more than 5 s after the recovery started.
            return False
        highwater = self.active_highwaters.get(tp)
        applied = self.active_offsets.get(tp)
        find = self.first_committed_record
        if find is None or tp not in self.active_tps or highwater is None or applied is None:
            return False
        if applied >= highwater:
            return False
        try:
            found = await find(tp, applied + 1, highwater + 1)
        except Exception as exc:  # no answer: the next wait asks again
            log.warning("%s-%d: could not learn where the changelog ends (%r)", *tp, exc)
            return False
        if (
            tp not in self.active_tps
            or self.active_highwaters.get(tp) != highwater
            or self.active_offsets.get(tp) != applied
        ):
            return False  # a record applied or a rebalance meanwhile: the answer is stale
        if found is None:
            self.flush_buffers()  # the records applied so far reach the store first
            self.tp_to_table[tp].data.set_persisted_offset(tp, highwater)
            self.active_offsets[tp] = highwater
            log.info(
                "%s-%d: recovered through offset %d; no committed record after it up to the "
                "end (offset %d: commit markers or aborted records): recovery of this "
                "partition is complete",
                tp.topic,
                tp.partition,
                applied,
                highwater,
            )
            return True
        if idle:
            await self._read_again_if_skipped(tp, applied, found)
        return False

    async def _read_again_if_skipped(self, tp: TP, applied: int, found: int) -> None:
        position: int | None = await self.app.consumer.position(tp)
        if position is None or position <= found:
            return  # not fetched yet: it is on its way
        log.warning(
            "%s-%d: committed record %d was fetched (consumer position %d) but never reached "
            "the recovery (last applied: %d); reading the partition again from %d",
            tp.topic,
            tp.partition,
            found,
            position,
            applied,
            applied + 1,
        )
        await self.app.consumer.seek(tp, applied + 1)

    def _maybe_signal_recovery_end(self) -> None:
        if self.in_recovery and not self.need_recovery():
            self.flush_buffers()  # apply anything still in the buffers
            self._set_recovery_ended()
            if self._actives_span is not None:
                self._actives_span.set_tag("Actives-Ready", True)
            self.signal_recovery_end.set()

    def _maybe_signal_standbys_ready(self) -> None:
        standby_ready = self._standbys_span is None and self.tables.standbys_ready
        if not standby_ready and not self.standby_remaining_total():
            if self._standbys_span is not None:
                finish_span(self._standbys_span)
                self._standbys_span = None
            self.tables.on_standbys_ready()


class TransactionalTableManager(TableManager):  # type: ignore[misc]
    """Faust's table manager with :class:`TransactionalRecovery` (the app's ``TableManager``)."""

    _recovery: Recovery | None
    _changelog_queue: Any

    @property
    def changelog_queue(self) -> Any:
        """Faust's queue of fetched changelog records, except that resuming the app's flow
        does not empty it. Faust empties it at every resume, the last one right after the
        standby partitions started fetching: records queued then were gone while the consumer
        went on past them, a hole in the standby copy that its promotion keeps. Nothing here
        needs the emptying: a record at or below the last one applied to its partition is
        skipped, one of a partition not assigned is ignored, and the queue keeps each
        partition's records in fetch order after the last one taken from it."""
        if self._changelog_queue is None:
            self._changelog_queue = self.app.FlowControlQueue(
                maxsize=self.app.conf.stream_buffer_maxsize, clear_on_resume=False
            )
        return self._changelog_queue

    @property
    def recovery(self) -> TransactionalRecovery:
        if self._recovery is None:
            self._recovery = TransactionalRecovery(
                self.app, self, beacon=self.beacon, loop=self.loop
            )
        recovery: TransactionalRecovery = self._recovery
        return recovery


def use_broker_reader(app: Any, find: FirstCommittedRecord) -> None:
    """Hand the recovery of ``app`` (built with :class:`TransactionalTableManager`) the
    broker query that says where a changelog partition's committed records lie."""
    recovery = app.tables.recovery
    if not isinstance(recovery, TransactionalRecovery):
        raise TypeError(f"the app's recovery is {type(recovery).__name__}, not ours")
    recovery.first_committed_record = find


def use_restorer(app: Any, restorer: Restorer, follower: Follower) -> None:
    """Hand the recovery of ``app`` the bulk restorer of its tables' active partitions and the
    follower of their standby partitions."""
    recovery = app.tables.recovery
    if not isinstance(recovery, TransactionalRecovery):
        raise TypeError(f"the app's recovery is {type(recovery).__name__}, not ours")
    recovery.restorer = restorer
    recovery.follower = follower
