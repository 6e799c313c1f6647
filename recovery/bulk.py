"""The queue of bulk restores of one recovery: the active partitions of our tables that a
recovery hands to the restorer, restored one after the other.

A recovery (each rebalance starts one) replaces what the previous one queued: its round number
grows, and a restore of an older round stops at its next write batch (``still_wanted``). A
partition whose restore fails is tried again after a backoff (``recovery/retry.py``), from the
prefix its store already holds; after :data:`~recovery.retry.RESTORE_LIMIT_SECONDS` of
failures without a success it raises :class:`~recovery.retry.GaveUp`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from aiokafka.structs import TopicPartition

from recovery.restore import BulkTarget, Restorer
from recovery.retry import RESTORE_LIMIT_SECONDS, Backoff
from tables.formats import FormatRefused

log = logging.getLogger(__name__)


class BulkRestores:
    """Restores queued partitions with ``restorer``. ``highwater(tp)``: the offset of the
    partition's end for the recovery in progress (None: no longer ours to restore);
    ``store(tp)``: its store; ``restored(tp, highwater)``: called when it reached its end."""

    def __init__(
        self,
        restorer: Restorer,
        *,
        highwater: Callable[[TopicPartition], int | None],
        store: Callable[[TopicPartition], BulkTarget],
        restored: Callable[[TopicPartition, int], None],
    ) -> None:
        self.restorer = restorer
        self._highwater = highwater
        self._store_of = store
        self._restored = restored
        self.round = 0
        #: The partitions of the current round still to restore.
        self.pending: set[TopicPartition] = set()
        self._wanted = asyncio.Event()

    def start_round(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """A recovery started: restore ``tps`` instead of what an earlier one queued."""
        self.round += 1
        self.pending = set(tps)
        if self.pending:
            self._wanted.set()
        return sorted(self.pending)

    async def run(self, should_stop: Callable[[], bool]) -> None:
        """Restore what each round queued until ``should_stop()``."""
        while not should_stop():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wanted.wait(), timeout=1.0)
            if not self._wanted.is_set():
                continue
            self._wanted.clear()
            number = self.round
            for tp in sorted(self.pending):
                backoff = Backoff(
                    f"restoring {tp.topic}-{tp.partition}", limit=RESTORE_LIMIT_SECONDS
                )
                while number == self.round and not should_stop():
                    try:
                        if await self._restore_one(tp, number, should_stop):
                            break
                    except (asyncio.CancelledError, FormatRefused):
                        raise  # a refusal stops the worker: no retry reads another format
                    except Exception as exc:
                        # The store kept a prefix; less often while it keeps failing, so that
                        # a broker that is down is not asked once a second.
                        await asyncio.sleep(backoff.failed(exc))

    async def _restore_one(
        self, tp: TopicPartition, number: int, should_stop: Callable[[], bool]
    ) -> bool:
        """Restore ``tp``; True when it is done (or no longer ours to restore)."""
        highwater = self._highwater(tp)
        if highwater is None:
            return True

        def still_wanted() -> bool:
            return number == self.round and self._highwater(tp) == highwater and not should_stop()

        done = await self.restorer.restore(self._store_of(tp), tp, highwater + 1, still_wanted)
        if done and still_wanted():
            self.pending.discard(tp)
            self._restored(tp, highwater)
        return True
