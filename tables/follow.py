"""Warm standbys: the changelog partitions this worker keeps a copy of for another worker's
tasks (``DEDUPE_STANDBY_REPLICAS``), followed in bulk.

Faust's standbys go through its consumer, queue and per-record loop: slower than one busy
worker writes its changelog, so a standby falls ever further behind and a takeover then replays
the difference. The follower reads every followed partition with one
``read_committed`` consumer of its own and writes each fetch through the store's write path in
whole batches (with the write-ahead log), as the bulk restorer does (``tables/restore.py``).
A record is written only past the offset the store holds, so a partition that moved (promoted,
then followed again) is never written backwards. When a standby is promoted, the restorer reads
only what the follower had not yet written: the last moments of changelog.

Its lag per partition (the last stable offset minus the position written) is in ``/stats`` and
``/metrics``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from tables.restore import BATCH_RECORDS, BulkTarget, settle

log = logging.getLogger(__name__)


@dataclass
class Followed:
    """One followed partition: its store, the offset the store holds, and the lag."""

    store: BulkTarget
    held: int | None = None
    lag: int | None = None
    #: Any bulk restore of it was ended and compacted (before its first write; see
    #: :meth:`Follower._turn`).
    bulk_ended: bool = False


class LazyReader:
    """A consumer made by ``new_reader`` and started on first use, then kept until closed."""

    def __init__(self, new_reader: Callable[[], AIOKafkaConsumer]) -> None:
        self._new_reader = new_reader
        self._reader: AIOKafkaConsumer | None = None

    async def get(self) -> AIOKafkaConsumer:
        if self._reader is None:
            reader = self._new_reader()
            await reader.start()
            self._reader = reader
        return self._reader

    async def close(self) -> None:
        if self._reader is not None:
            reader, self._reader = self._reader, None
            await reader.stop()


class Follower:
    """Follows standby changelog partitions into their stores (see the module docstring)."""

    def __init__(self, new_reader: Callable[[], AIOKafkaConsumer]) -> None:
        self._reader = LazyReader(new_reader)
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
        """Follow until ``should_stop()``; errors are logged and the partitions read again."""
        while not should_stop():
            try:
                await self._turn()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("following the standby partitions failed (%r); starting over", exc)
                with contextlib.suppress(Exception):
                    await self.close()
                self._changed.set()
                await asyncio.sleep(1.0)

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
        reader = await self._reader.get()
        if self._changed.is_set():
            self._changed.clear()
            tps = sorted(self.followed)
            reader.assign(tps)
            for tp in tps:
                followed = self.followed[tp]
                if not followed.bulk_ended:
                    # A partition new to the follower may hold a bulk restore that a rebalance
                    # stopped (active here before, a standby now): what it wrote is flushed and
                    # its mark cleared, then compacted (a restore compacts only at its end, and
                    # a write could stall the event loop on it) and the usual options are back,
                    # so the follower goes on from that prefix with the WAL, not through
                    # memtables flushed at every write. Ending it again is harmless.
                    followed.store.end_bulk(tp.partition)
                    if not await settle(followed.store, tp, lambda: not self._changed.is_set()):
                        return  # the partitions followed changed meanwhile: start over
                    followed.bulk_ended = True
                held = followed.store.restored_offset(tp.partition)
                reader.seek(tp, 0 if held is None else held + 1)
        fetched = await reader.getmany(timeout_ms=500)
        for tp, records in fetched.items():
            self._write(tp, [(r.offset, r.key, r.value) for r in records])
        for tp, followed in list(self.followed.items()):
            if tp not in reader.assignment():
                continue
            stable = reader.last_stable_offset(tp)
            position = await reader.position(tp)
            if stable is not None and stable >= 0:
                followed.lag = max(stable - position, 0)

    def _write(self, tp: TopicPartition, records: list[tuple[int, bytes, bytes | None]]) -> None:
        followed = self.followed.get(tp)
        if followed is None or not records:
            return  # no longer a standby here (checked right before writing: no await below)
        store = followed.store
        held = store.restored_offset(tp.partition)
        fresh = [r for r in records if held is None or r[0] > held]
        for i in range(0, len(fresh), BATCH_RECORDS):
            chunk = fresh[i : i + BATCH_RECORDS]
            store.write_restored(
                tp.partition, [(k, v) for _, k, v in chunk], chunk[-1][0], wal=True
            )
        followed.held = store.restored_offset(tp.partition)
