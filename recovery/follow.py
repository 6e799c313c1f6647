"""Warm standbys: the changelog partitions this worker keeps a copy of for another worker's
tasks (``DEDUPE_STANDBY_REPLICAS``), followed in bulk.

Faust's standbys go through its consumer, queue and per-record loop: slower than one busy
worker writes its changelog, so a standby falls ever further behind and a takeover then replays
the difference. The follower reads every followed partition with the changelog reader
(``recovery/reader.py``, read_committed, the same one the restore uses) and writes each fetch
through the store's write path in whole batches (with the write-ahead log), as the bulk
restorer does (``recovery/restore.py``). Each fetch starts past what the store holds and is
written only if the store still holds the same offset when the fetch is back, so a partition
that moved (promoted, then followed again) is never written backwards. When a standby is
promoted, the restorer reads only what the follower had not yet written: the last moments of
changelog.

Its lag per partition (the last stable offset minus the position read) is in ``/stats`` and
``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiokafka.structs import TopicPartition

from recovery.restore import BulkTarget, RecordSource, wait_compacted, write_batches
from recovery.retry import Backoff
from tables.formats import FormatRefused

log = logging.getLogger(__name__)

#: How long (ms) the broker may hold a follower's fetch of a partition at its end: a standby
#: copy needs no sooner answer, and shorter waits only poll the broker more often.
FOLLOW_WAIT_MS = 200


@dataclass
class Followed:
    """One followed partition: its store, the offset the store holds, and the lag."""

    store: BulkTarget
    held: int | None = None
    lag: int | None = None
    #: Any bulk restore of it was ended and compacted (before its first write; see
    #: :meth:`Follower._turn`).
    bulk_ended: bool = False
    #: Where the next fetch starts when the store holds less (past commit markers and aborted
    #: records, which the store's offset does not count); None: from the store's offset.
    position: int | None = None


class Follower:
    """Follows standby changelog partitions into their stores (see the module docstring)."""

    def __init__(self, reader: RecordSource) -> None:
        self._reader = reader
        self.followed: dict[TopicPartition, Followed] = {}
        self._changed = asyncio.Event()

    def follow(self, stores: Mapping[TopicPartition, BulkTarget]) -> None:
        """Follow exactly these partitions from now on (called at each rebalance)."""
        self.followed = {
            tp: self.followed[tp] if tp in self.followed else Followed(store)
            for tp, store in stores.items()
        }
        self._changed.set()

    def status(self) -> dict[TopicPartition, Followed]:
        return dict(self.followed)

    async def close(self) -> None:
        await self._reader.close()

    async def run(self, should_stop: Callable[[], bool]) -> None:
        """Follow until ``should_stop()``; errors are logged and the partitions read again
        after a backoff (a standby never gives up: it only falls behind, and its lag says so)."""
        backoff = Backoff("following the standby partitions", limit=None)
        while not should_stop():
            try:
                await self._turn()
                backoff.reset()
            except (asyncio.CancelledError, FormatRefused):
                raise  # a refusal stops the worker: no retry reads another format
            except Exception as exc:
                delay = backoff.failed(exc)
                # The partitions are set up again (the reader itself is shared with the
                # restorer and stays open: it finds a moved leader on its own).
                self._changed.set()
                await asyncio.sleep(delay)

    async def _turn(self) -> None:
        if not self.followed:
            # Cleared here too: left set by a rebalance that gave this worker no standby
            # partition, the wait below returned at once and this loop took a whole core of an
            # idle worker (and of a busy one's event loop). No await lies between the check and
            # the clear, so a ``follow()`` after it sets the event again.
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout=1.0)
            return
        if self._changed.is_set():
            self._changed.clear()
            for tp in sorted(self.followed):
                followed = self.followed[tp]
                if not followed.bulk_ended:
                    # A partition new to the follower may hold a bulk restore that a rebalance
                    # stopped (active here before, a standby now): what it wrote is flushed and
                    # its mark cleared, then compacted (a restore compacts only at its end, and
                    # a write could stall the event loop on it) and the usual options are back,
                    # so the follower goes on from that prefix with the WAL, not through
                    # memtables flushed at every write. Ending it again is harmless.
                    followed.store.end_bulk(tp.partition)
                    if not await wait_compacted(followed.store, tp, self._unchanged):
                        return  # the partitions followed changed meanwhile: start over
                    followed.bulk_ended = True
        followed_now = sorted(self.followed.items())
        await asyncio.gather(*(self._follow_one(tp, followed) for tp, followed in followed_now))

    def _unchanged(self) -> bool:
        return not self._changed.is_set()

    async def _follow_one(self, tp: TopicPartition, followed: Followed) -> None:
        """One fetch of ``tp`` past what its store holds, written if it is still followed and
        its store holds the same offset (checked right before writing: no await below it)."""
        held = followed.store.restored_offset(tp.partition)
        start = 0 if held is None else held + 1
        if followed.position is not None:
            start = max(start, followed.position)
        fetched = await self._reader.fetch(tp, start, sys.maxsize, max_wait_ms=FOLLOW_WAIT_MS)
        if self.followed.get(tp) is not followed:
            return  # no longer a standby here, or followed anew
        store = followed.store
        if store.restored_offset(tp.partition) != held:
            return  # written by someone else meanwhile: the next fetch starts past it
        for batch, last in write_batches(fetched):
            store.write_restored(tp.partition, batch, last, wal=True)
        followed.position = fetched.next_offset
        followed.held = store.restored_offset(tp.partition)
        if fetched.stable >= 0:
            followed.lag = max(fetched.stable - fetched.next_offset, 0)
