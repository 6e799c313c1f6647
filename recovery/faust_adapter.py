"""The Faust adapter of the recovery: Faust's recovery service still finds a rebalance's changelog
partitions, their ends and the offsets their stores hold, and holds the app's flow until the
recovery ends; every partition is read with the one changelog reader (``recovery/reader.py``):
active ones by the restorer (``recovery/bulk.py``), standby ones by the follower
(``recovery/follow.py``). Faust's per-record loop applies nothing, and never ends a partition
on its consumer's *position*, which says what was fetched, not what a store holds.
Faust's private members are reached through the shims of ``adapters/faust_privates.py``."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from typing import Any, cast

from aiokafka.structs import TopicPartition
from faust.types import TP, CollectionT
from mode import Service

from adapters.faust_privates import RecoveryShim, TableManagerShim, crash
from recovery.bulk import BulkRestores
from recovery.follow import Follower
from recovery.restore import BulkTarget
from recovery.retry import GaveUp
from tables.transactional import TransactionalTable

log = logging.getLogger(__name__)


class TransactionalRecovery(RecoveryShim):
    """Faust's recovery service, with the restorer and the follower (module docstring)."""

    #: Handed in by :meth:`use` (``recovery.install``) before the app starts.
    bulk: BulkRestores
    follower: Follower

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: The standby partitions of this rebalance the follower takes, as Faust adds them.
        self._standbys_next: dict[TP, BulkTarget] = {}

    def use(self, bulk: BulkRestores, follower: Follower) -> None:
        """The restores of active partitions and the follower of standby ones."""
        self.bulk, self.follower = bulk, follower

    async def on_stop(self) -> None:
        await super().on_stop()
        await self.bulk.restorer.close()
        await self.follower.close()

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Faust's; then the follower follows exactly this assignment's standby partitions of
        our tables (before any restore starts: a promoted one is no longer followed)."""
        self._standbys_next = {}
        await super().on_rebalance(assigned, revoked, newly_assigned, generation_id)
        if generation_id == self.app.consumer_generation_id:
            self.follower.follow(
                {TopicPartition(tp.topic, tp.partition): s for tp, s in self._standbys_next.items()}
            )

    def add_standby(self, table: Any, tp: TP) -> None:
        """A standby partition goes to the follower, not to Faust's standbys: Faust's consumer,
        which paused it at the rebalance, never resumes it."""
        self.tp_to_table[tp] = table
        self._standbys_next[tp] = table.data

    @Service.task  # type: ignore[untyped-decorator]
    async def _follow_standbys(self) -> None:
        await self.follower.run(lambda: bool(self.should_stop))

    @Service.task  # type: ignore[untyped-decorator]
    async def _bulk_restore(self) -> None:
        try:
            await self.bulk.run(lambda: bool(self.should_stop))
        except GaveUp as exc:
            log.critical("%s: stopping the worker", exc)
            crash(self.app, exc)

    def recovery_started(self) -> None:
        """The end signal is cleared here, when a recovery starts, instead of at every turn of
        Faust's loop: the restorer ends a recovery whenever its last partition is restored."""
        self.signal_recovery_end.clear()

    async def slurp_changelogs(self) -> None:
        """Replaces Faust's loop (``faust/tables/recovery.py``), which applied the records
        Faust's consumer queued and, after two empty 5 s waits of the queue, ended each active
        partition whose consumer *position* had reached its end: the position of a partition
        the restorer reads is its end from the start (:meth:`offsets_sought`), so Faust's loop
        ended a restore still under way (fault row F16). Here a partition ends only when its
        restore reached the end (:meth:`bulk_restored`).

        What Faust's consumer still queues is dropped, as every partition is read by the
        restorer or the follower: it resumes the active partitions during a recovery, from
        their end (restored ones) or from the offset their store holds (the rest), where no
        record the store lacks can be written before the recovery ends (``recovery/restore.py``).
        The queue is still drained, or Faust's consumer would block on it once full, and the
        source topics' records with it."""
        queue = self.tables.changelog_queue
        while not self.should_stop:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(queue.get(), timeout=1.0)

    async def offsets_sought(self, consumer: Any, offsets: Counter[TP]) -> None:
        """After Faust's seek, every active partition short of its end goes to the restorer,
        and Faust's consumer waits at its end: it must not read it as well."""
        if offsets is not self.active_offsets:
            return
        remaining = self.active_remaining()
        bulk = self.bulk.start_round(
            TopicPartition(tp.topic, tp.partition) for tp in remaining if remaining[tp] > 0
        )
        if bulk:
            await consumer.seek_wait({TP(*tp): self.active_highwaters[TP(*tp)] + 1 for tp in bulk})

    def bulk_highwater(self, tp: TopicPartition) -> int | None:
        """The end the restore of ``tp`` reads to (None: not active here any more)."""
        return self.active_highwaters.get(TP(*tp)) if TP(*tp) in self.active_tps else None

    def bulk_store(self, tp: TopicPartition) -> BulkTarget:
        return cast(BulkTarget, self.tp_to_table[TP(*tp)].data)

    def bulk_restored(self, tp: TopicPartition, highwater: int) -> None:
        self.active_offsets[TP(*tp)] = highwater
        self._maybe_signal_recovery_end()

    def _maybe_signal_recovery_end(self) -> None:
        if self.in_recovery and not self.need_recovery():
            self.set_recovery_ended()
            if self.actives_span is not None:
                self.actives_span.set_tag("Actives-Ready", True)
            self.signal_recovery_end.set()


class TransactionalTableManager(TableManagerShim):
    """Faust's table manager with :class:`TransactionalRecovery` (the app's ``TableManager``)."""

    def add(self, table: CollectionT) -> CollectionT:
        """Faust's, for a table whose store the restorer and the follower write
        (:class:`~tables.transactional.TransactionalTable`): the recovery reads no partition
        any other way, so another table would never be restored."""
        if not isinstance(table, TransactionalTable):
            raise TypeError(
                f"table {table.name!r} is a {type(table).__name__}: this app's recovery only "
                "restores TransactionalTable (recovery/faust_adapter.py)"
            )
        added: CollectionT = super().add(table)
        return added

    @property
    def recovery(self) -> TransactionalRecovery:
        if self.recovery_built is None:
            self.recovery_built = TransactionalRecovery(
                self.app, self, beacon=self.beacon, loop=self.loop
            )
        return cast(TransactionalRecovery, self.recovery_built)
