"""The Faust adapter of the recovery: Faust's loop (``Recovery._slurp_changelogs``) for what Faust
still reads, ended by ``recovery/end_rule.py`` (Faust's rule, a consumer *position* at the end,
skips records fetched and not applied); our tables' active partitions go to the restorer
(``recovery/bulk.py``), standby ones to the follower (``recovery/follow.py``).
:data:`FAUST_PRIVATES` lists the Faust members the worker relies on and the files naming them
(``tests/unit/test_private_names.py`` checks both)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from time import monotonic
from typing import Any, cast

from aiokafka.structs import TopicPartition
from faust import App
from faust.stores.base import SerializedStore
from faust.tables import TableManager
from faust.tables.recovery import Recovery
from faust.transport.consumer import TransactionManager as FaustTxns
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread as ConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP, EventT
from faust.utils.tracing import finish_span
from mode import Service
from mode.threads import ServiceThread

from recovery.bulk import BulkRestores
from recovery.end_rule import IDLE_WAIT_SECONDS, EndRule
from recovery.follow import Follower
from recovery.restore import BulkTarget
from recovery.retry import GaveUp
from tables.formats import FormatRefused

log = logging.getLogger(__name__)

#: ``(class, member, files that name it)``: Faust's (and mode's) private or undocumented members
#: the worker relies on. Outside the recovery: the consumer's and the app's (app/eos/consumer.py)
#: and the store's subclass hooks (tables/store_mapping.py); app/factory.py overrides mode's.
HERE, CONSUMER, APP = "recovery/faust_adapter.py", "app/eos/consumer.py", "app/factory.py"
_RECOVERY = """_slurp_changelogs _seek_offsets _set_recovery_started _set_recovery_ended buffers
    _active_events_received_at _standby_events_received_at _last_active_event_processed_at
    _processing_times _last_flush_at _actives_span _standbys_span num_samples_required_for_estimate
    buffer_sizes flush_buffers need_recovery active_remaining standby_remaining_total
    signal_recovery_end"""
_CONSUMER = """_new_consumer_thread _drain_messages _wait_next_records _to_message _read_offset
    _buffered_partitions perform_seek consumer_stopped_errors suspend_flow flow_active _thread"""
_THREAD = "_highwaters _fetch_records _create_worker_consumer _ensure_consumer"
_STORE = "tables/store_mapping.py, bench/age_out.py, bench/scale.py, bench/scale_phases.py"
FAUST_PRIVATES: list[tuple[type, str, str]] = [
    *((TableManager, name, HERE) for name in ("_recovery", "_changelog_queue")),
    *((Recovery, name, HERE) for name in _RECOVERY.split()),
    *((Recovery, n, f"{HERE}, recovery/end_rule.py") for n in ("tp_to_table", "active_highwaters")),
    (Recovery, "completed", f"app/web.py, {CONSUMER}"),
    (App, "_crash", f"{HERE}, {CONSUMER}"),
    *((App, n, CONSUMER) for n in ("_new_transport", "_consumer_wait_empty")),
    (App, "on_init_dependencies", APP),
    (App, "in_transaction", f"{APP}, app/eos/*"),
    (App, "rebalancing", f"app/web.py, {CONSUMER}"),
    *((SerializedStore, n, _STORE) for n in ("_get", "_set", "_del", "_iteritems")),
    *((FaustConsumer, name, CONSUMER) for name in _CONSUMER.split()),
    *((ConsumerThread, n, CONSUMER) for n in _THREAD.split()),
    (ServiceThread, "thread_loop", CONSUMER),
    *((FaustTxns, n, "app/eos/manager.py") for n in ("on_rebalance", "on_partitions_revoked")),
]


class TransactionalRecovery(Recovery):  # type: ignore[misc]
    """Faust's recovery service, with our end rule and bulk paths (module docstring)."""

    #: Handed in by :meth:`use`. Without an end rule no partition ends before its last record
    #: was applied; without the bulk restores and the follower, Faust's loop reads our tables'
    #: active and standby partitions.
    end_rule: EndRule | None = None
    bulk: BulkRestores | None = None
    follower: Follower | None = None
    # Faust's attributes that mypy cannot type from its code:
    _last_active_event_processed_at: float | None
    _standbys_span: Any

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
            self.app._crash(exc)

    def _set_recovery_started(self) -> None:
        """Faust's, and the end signal is cleared here, when a recovery starts, instead of at
        every turn of the loop below: the restorer may end a recovery between two turns."""
        super()._set_recovery_started()
        self.signal_recovery_end.clear()

    @Service.task  # type: ignore[untyped-decorator]
    async def _slurp_changelogs(self) -> None:
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

    async def _seek_offsets(
        self, consumer: Any, tps: set[TP], offsets: Counter[TP], title: str
    ) -> None:
        """Faust's seek; then our tables' active partitions go to the restorer, and any other
        one short of its end by commit markers alone ends here, not after an idle wait."""
        await super()._seek_offsets(consumer, tps, offsets, title)
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
            self._active_events_received_at[tp] = now
        elif tp in self.standby_tps:
            offsets = self.standby_offsets
            self._standby_events_received_at.setdefault(tp, now)
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
        """Faust's queue, not emptied when the app's flow resumes (records queued as standbys
        started fetching were lost); stale records are skipped by :meth:`_apply` instead."""
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
