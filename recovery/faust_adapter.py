"""The Faust adapter of the recovery: Faust's loop (``RecoveryShim.slurp_changelogs``) for
what Faust still reads, ended by ``recovery/end_rule.py`` (Faust's rule, a consumer *position*
at the end, skips records fetched and not applied); our tables' active partitions go to the
restorer (``recovery/bulk.py``), standby ones to the follower (``recovery/follow.py``).
Faust's private members are reached through the shims of ``adapters/faust_privates.py``."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from time import monotonic
from typing import Any, cast

from aiokafka.structs import TopicPartition
from faust.types import TP, EventT
from faust.utils.tracing import finish_span
from mode import Service

from adapters.faust_privates import RecoveryShim, TableManagerShim, crash
from recovery.bulk import BulkRestores
from recovery.end_rule import IDLE_WAIT_SECONDS, EndRule
from recovery.follow import Follower
from recovery.restore import BulkTarget
from recovery.retry import GaveUp
from tables.formats import FormatRefused

log = logging.getLogger(__name__)


class TransactionalRecovery(RecoveryShim):
    """Faust's recovery service, with our end rule and bulk paths (module docstring)."""

    #: Handed in by :meth:`use`. Without an end rule no partition ends before its last record
    #: was applied; without the bulk restores and the follower, Faust's loop reads our tables'
    #: active and standby partitions.
    end_rule: EndRule | None = None
    bulk: BulkRestores | None = None
    follower: Follower | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The standby partitions of this rebalance the follower takes, as Faust adds them.
        self._standbys_next: dict[TP, BulkTarget] = {}

    def use(self, end_rule: EndRule, bulk: BulkRestores | None, follower: Follower | None) -> None:
        """The end rule, and the bulk restores and follower (None: Faust's loop reads all)."""
        self.end_rule, self.bulk, self.follower = end_rule, bulk, follower

    async def on_stop(self) -> None:
        await super().on_stop()
        if self.end_rule is not None and self.end_rule.close is not None:
            await self.end_rule.close()
        if self.bulk is not None:
            await self.bulk.restorer.close()
        if self.follower is not None:
            await self.follower.close()

    def bulk_pending(self, tp: TP) -> bool:
        """The restorer reads ``tp`` in this recovery (it, not Faust's loop, ends it)."""
        return self.bulk is not None and TopicPartition(tp.topic, tp.partition) in self.bulk.pending

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Faust's; then the follower follows exactly this assignment's standby partitions of
        our tables (before any restore starts: a promoted one is no longer followed)."""
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

    @Service.task  # type: ignore[untyped-decorator]
    async def _bulk_restore(self) -> None:
        if self.bulk is None:
            return
        try:
            await self.bulk.run(lambda: bool(self.should_stop))
        except GaveUp as exc:
            log.critical("%s: stopping the worker", exc)
            crash(self.app, exc)

    def set_recovery_started(self) -> None:
        """Faust's, and the end signal is cleared here, when a recovery starts, instead of at
        every turn of the loop below: the restorer may end a recovery between two turns."""
        super().set_recovery_started()
        self.signal_recovery_end.clear()

    async def slurp_changelogs(self) -> None:
        """Faust's loop (``faust/tables/recovery.py``), with our end rule."""
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
                            await self.end_if_complete(tp, idle=True)
                    self._maybe_signal_recovery_end()
                    continue
                await self._apply(event)
                self._maybe_signal_recovery_end()
                self._maybe_signal_standbys_ready()
            except (asyncio.CancelledError, FormatRefused):
                raise  # a refusal stops the worker: the record is not skipped
            except Exception as exc:
                log.warning("Error in recovery %r", exc, exc_info=True)

    async def seek_offsets(
        self, consumer: Any, tps: set[TP], offsets: Counter[TP], title: str
    ) -> None:
        """Faust's seek; then our tables' active partitions go to the restorer, and any other
        one short of its end by commit markers alone ends here, not after an idle wait."""
        await super().seek_offsets(consumer, tps, offsets, title)
        if offsets is not self.active_offsets:
            return
        remaining = self.active_remaining()
        bulk: list[TopicPartition] = []
        if self.bulk is not None:
            bulk = self.bulk.start_round(
                TopicPartition(tp.topic, tp.partition)
                for tp in remaining
                if remaining[tp] > 0 and hasattr(self.tp_to_table[tp].data, "begin_bulk")
            )
        if bulk:
            # Faust's consumer must not read them as well: it waits at their end.
            await consumer.seek_wait({TP(*tp): self.active_highwaters[TP(*tp)] + 1 for tp in bulk})
        for tp in sorted(remaining):
            if tp not in bulk:
                await self.end_if_complete(tp, idle=False)

    def bulk_highwater(self, tp: TopicPartition) -> int | None:
        """The end the restore of ``tp`` reads to (None: not active here any more)."""
        return self.active_highwaters.get(TP(*tp)) if TP(*tp) in self.active_tps else None

    def bulk_store(self, tp: TopicPartition) -> BulkTarget:
        return cast(BulkTarget, self.tp_to_table[TP(*tp)].data)

    def bulk_restored(self, tp: TopicPartition, highwater: int) -> None:
        self.active_offsets[TP(*tp)] = highwater
        self._maybe_signal_recovery_end()

    async def _apply(self, event: EventT) -> None:
        """Buffer one changelog record (applied by whole buffers), as Faust does."""
        now = monotonic()
        tp: TP = event.message.tp
        offset: int = event.message.offset
        active = tp in self.active_tps
        if active:
            offsets = self.active_offsets
            self.active_events_received_at[tp] = now
        elif tp in self.standby_tps:
            offsets = self.standby_offsets
            self.standby_events_received_at.setdefault(tp, now)
        else:
            # Faust fell through here and applied the record to the previous record's table.
            log.warning("recovery: record of %s-%d, which is not assigned, ignored", *tp)
            return
        if self.bulk_pending(tp) or tp in self._standbys_next:
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
            self.last_flush_at = now
        if not active:
            return
        after = monotonic()
        last = self.last_active_event_processed_at
        if last is not None:
            times = self.processing_times
            times.append(after - last)
            if len(times) > self.num_samples_required_for_estimate:
                times.popleft()
        self.last_active_event_processed_at = after
        highwater = self.active_highwaters.get(tp)
        if highwater is not None and highwater - offset == 1:
            await self.end_if_complete(tp, idle=False)  # the end is one offset away: a marker?

    async def end_if_complete(self, tp: TP, *, idle: bool) -> bool:
        """End the recovery of ``tp`` if the end rule finds it complete (True). One the restorer
        reads is left to it: after an idle wait it looks skipped, and would be read twice."""
        if self.end_rule is None or self.bulk_pending(tp):
            return False
        return await self.end_rule.end_if_complete(self, tp, idle=idle)

    def _maybe_signal_recovery_end(self) -> None:
        if self.in_recovery and not self.need_recovery():
            self.flush_buffers()  # apply anything still in the buffers
            self.set_recovery_ended()
            if self.actives_span is not None:
                self.actives_span.set_tag("Actives-Ready", True)
            self.signal_recovery_end.set()

    def _maybe_signal_standbys_ready(self) -> None:
        standby_ready = self.standbys_span is None and self.tables.standbys_ready
        if not standby_ready and not self.standby_remaining_total():
            if self.standbys_span is not None:
                finish_span(self.standbys_span)
                self.standbys_span = None
            self.tables.on_standbys_ready()


class TransactionalTableManager(TableManagerShim):
    """Faust's table manager with :class:`TransactionalRecovery` (the app's ``TableManager``)."""

    @property
    def changelog_queue(self) -> Any:
        """Faust's queue, not emptied when the app's flow resumes (records queued as standbys
        started fetching were lost); stale records are skipped by :meth:`_apply` instead."""
        if self.changelog_queue_built is None:
            self.changelog_queue_built = self.app.FlowControlQueue(
                maxsize=self.app.conf.stream_buffer_maxsize, clear_on_resume=False
            )
        return self.changelog_queue_built

    @property
    def recovery(self) -> TransactionalRecovery:
        if self.recovery_built is None:
            self.recovery_built = TransactionalRecovery(
                self.app, self, beacon=self.beacon, loop=self.loop
            )
        return cast(TransactionalRecovery, self.recovery_built)
