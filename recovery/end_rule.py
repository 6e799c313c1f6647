"""The recovery end rule: when the recovery of an active changelog partition is complete.

A partition counts as recovered when the last record applied reaches its end (its
"highwater": under exactly-once, the last stable offset minus one). A transactional changelog
ends with a commit marker that a read_committed reader never delivers, and may end with aborted
records, so that end is never *reached* by a record. The rule:

- A partition is recovered only when the changelog reader (``recovery/reader.py``,
  read_committed) finds no committed record between the last record applied and the end. That
  question is asked for every partition short of its end when a recovery starts (a promoted
  standby copy holds the record before the last commit marker), after the record one below the
  end (the usual case: the end is the last transaction's commit marker) and after each idle
  wait of :data:`IDLE_WAIT_SECONDS` of the recovery's queue.
- When committed records remain after such a wait and the consumer's position is already past
  the first of them, they were fetched but never reached the recovery: the partition is read
  again from the record after the last one applied (a record applied twice is skipped by its
  offset, so this is always safe).

The consumer's position is never the evidence: it says what was fetched, not what was applied
(fault rows F16 and F17). Partitions the bulk restorer reads end when their restore reaches
the end instead (``recovery/bulk.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, Final, Protocol

from faust.types import TP

log = logging.getLogger(__name__)

#: ``(tp, start, end)`` -> offset of the first record a read_committed reader sees in
#: ``[start, end)``, or None. Raises when the broker does not answer.
FirstCommittedRecord = Callable[[TP, int, int], Awaitable[int | None]]

#: How long the recovery loop waits for a changelog record before it looks at the partitions
#: still short of their end (Faust's value).
IDLE_WAIT_SECONDS = 5.0

#: :meth:`EndRule.committed_after` could not learn the answer (the next wait asks again).
UNKNOWN: Final = -1


class RecoveryState(Protocol):
    """What the rule reads and sets of Faust's recovery service (``recovery/faust_adapter.py``:
    Faust's members, typed here)."""

    active_tps: set[TP]
    active_highwaters: Any
    active_offsets: Any
    tp_to_table: Any
    app: Any

    def flush_buffers(self) -> None: ...


class EndRule:
    """The questions of the rule (module docstring), asked through ``find``."""

    def __init__(
        self, find: FirstCommittedRecord, close: Callable[[], Awaitable[None]] | None = None
    ) -> None:
        self.find = find
        #: Closes what ``find`` reads with (called when the recovery stops).
        self.close = close

    async def committed_after(self, tp: TP, applied: int, highwater: int) -> int | None:
        """Offset of the first committed record after ``applied`` up to ``highwater``
        (included); None: there is none, the partition is complete; :data:`UNKNOWN`: no
        answer from the broker."""
        try:
            return await self.find(tp, applied + 1, highwater + 1)
        except Exception as exc:
            log.warning("%s-%d: could not learn where the changelog ends (%r)", *tp, exc)
            return UNKNOWN

    async def end_if_complete(self, recovery: RecoveryState, tp: TP, *, idle: bool) -> bool:
        """End the recovery of active partition ``tp`` by the rule; True when it ended.
        ``idle``: the queue was empty for a whole wait, so a record fetched and not applied by
        now never reached it."""
        highwater = recovery.active_highwaters.get(tp)
        applied = recovery.active_offsets.get(tp)
        if tp not in recovery.active_tps or highwater is None or applied is None:
            return False
        if applied >= highwater:
            return False
        found = await self.committed_after(tp, applied, highwater)
        if found == UNKNOWN or (
            tp not in recovery.active_tps
            or recovery.active_highwaters.get(tp) != highwater
            or recovery.active_offsets.get(tp) != applied
        ):
            return False  # no answer, or made stale by a record applied or a rebalance
        if found is None:
            recovery.flush_buffers()  # the records applied so far reach the store first
            recovery.tp_to_table[tp].data.set_persisted_offset(tp, highwater)
            recovery.active_offsets[tp] = highwater
            self.log_complete(tp, applied, highwater)
            return True
        if idle:
            await self.read_again_if_skipped(recovery.app.consumer, tp, applied, found)
        return False

    @staticmethod
    def log_complete(tp: TP, applied: int, highwater: int) -> None:
        log.info(
            "%s-%d: recovered through offset %d; no committed record after it up to the end "
            "(offset %d: commit markers or aborted records): recovery of this partition is "
            "complete",
            tp.topic,
            tp.partition,
            applied,
            highwater,
        )

    @staticmethod
    async def read_again_if_skipped(consumer: Any, tp: TP, applied: int, found: int) -> None:
        """After an idle wait: if ``consumer`` fetched past committed record ``found`` without
        it reaching the recovery, read the partition again from after ``applied``."""
        position: int | None = await consumer.position(tp)
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
        await consumer.seek(tp, applied + 1)
