"""The broker queries of the transaction layer about its source partitions: committed offsets
(admin client), log starts, settled ends ("settled": no transaction open, the last stable offset
at the log end), and the first committed record in a range (one shared read_committed reader).
Changelogs are read by ``recovery/reader.py``, not here.
Handed its settings, group id and source topics; knows nothing of tasks beyond their numbers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition
from faust.types import TP

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)

#: A range check polls the broker this often (seconds) until the position passes the range.
GAP_POLL = 0.05


class BrokerReader:
    """Read-only questions to the broker (see the module docstring)."""

    def __init__(
        self,
        settings: EosSettings,
        group_id: str,
        source_topics: frozenset[str],
        task_partitions: Callable[[], Iterable[int]],
    ) -> None:
        self.settings = settings
        self.group_id = group_id
        self.source_topics = source_topics
        self._task_partitions = task_partitions
        self._admin: AIOKafkaAdminClient | None = None
        self._reader: AIOKafkaConsumer | None = None
        #: Offset readers (last stable offsets, log ends and starts), kept between rebalances:
        #: starting a pair for every rebalance cost a takeover some 0.2 s.
        self._ends: tuple[AIOKafkaConsumer, AIOKafkaConsumer] | None = None
        #: The range reader is shared by the agent's gap checks, the recovery and the stall
        #: watchdog: one user at a time.
        self._lock = asyncio.Lock()

    async def close(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None
        await self._drop_end_readers()

    # -- the first committed record in a range ---------------------------------------------

    async def first_committed_record(self, tp: TP, start: int, end: int) -> int | None:
        """Offset of the first record a read_committed reader sees in [start, end), if any: a
        gap in a source partition (a partition of another topic is given up afterwards, so
        the reader does not go on fetching it).
        Raises ``TimeoutError`` when the broker does not answer within the commit timeout."""
        tp = TopicPartition(tp.topic, tp.partition)
        async with self._lock:
            reader = await self._started_reader()
            try:
                return await self._first_record(reader, tp, start, end)
            finally:
                if tp.topic not in self.source_topics and tp in reader.assignment():
                    reader.assign(sorted(reader.assignment() - {tp}))

    async def first_record_from(self, tp: TopicPartition, start: int) -> int | None:
        """Offset of the first committed record at or after ``start``, if any (up to the
        partition's last stable offset)."""
        async with self._lock:
            reader = await self._started_reader()
            stable: int = (await reader.end_offsets([tp]))[tp]
            if stable <= start:
                return None
            return await self._first_record(reader, tp, start, stable)

    async def stable_end(self, tp: TopicPartition) -> int:
        """The partition's last stable offset."""
        async with self._lock:
            reader = await self._started_reader()
            end: int = (await reader.end_offsets([tp]))[tp]
            return end

    async def _started_reader(self) -> AIOKafkaConsumer:
        if self._reader is None:
            reader = AIOKafkaConsumer(
                bootstrap_servers=self.settings.bootstrap_servers,
                **self.settings.kafka_client_kwargs(),
                isolation_level="read_committed",
                enable_auto_commit=False,
                fetch_max_wait_ms=10,
            )
            await reader.start()
            await asyncio.sleep(0)  # aiokafka 0.14: let its background task start
            self._reader = reader
        return self._reader

    async def _first_record(
        self, reader: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int
    ) -> int | None:
        # Gaps are frequent on transactional source topics (a commit marker after each of the
        # writers' commits), so keep every source partition assigned and only seek: an
        # assignment change would reset the reader and cost a round trip of its own.
        if tp not in reader.assignment():
            wanted = {
                TopicPartition(t, p) for t in self.source_topics for p in self._task_partitions()
            }
            reader.assign(sorted(wanted | {tp}))
        reader.seek(tp, start)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.commit_timeout
        while await reader.position(tp) < end:
            left = deadline - loop.time()
            if left <= 0:
                # Nothing below ``end`` came back in time. The gap is before a record already
                # delivered (or below the last stable offset), so no transaction is open in it:
                # the broker did not answer (paused, overloaded), and the gap is unknown.
                raise TimeoutError(
                    f"no answer for {tp.topic}-{tp.partition} offsets [{start}, {end}) "
                    f"within {self.settings.commit_timeout:g}s"
                )
            # Short polls: a range of control records only (commit markers, aborted batches)
            # moves the position without returning a record, and ``getmany`` would wait for
            # records until its timeout.
            batch = await reader.getmany(tp, timeout_ms=max(1, round(min(left, GAP_POLL) * 1000)))
            for record in batch.get(tp, []):
                if record.offset < end:
                    found: int = record.offset
                    return found
        return None

    # -- committed offsets and where partitions start ---------------------------------------

    async def committed_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(
                bootstrap_servers=self.settings.bootstrap_servers,
                **self.settings.kafka_client_kwargs(),
            )
            await self._admin.start()
        result = await self._admin.list_consumer_group_offsets(self.group_id, partitions=tps)
        return {tp: meta.offset for tp, meta in result.items() if meta is not None}

    async def committed_offsets_retrying(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """:meth:`committed_offsets`, retried until the broker answers."""
        return await self._retrying(
            "reading committed offsets", lambda: self.committed_offsets(tps)
        )

    async def start_offsets(
        self, tps: list[TopicPartition], committed: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Committed offset, or the log start for a partition the group never committed
        (retried until the broker answers)."""
        starts = {tp: off for tp, off in committed.items() if off is not None and off >= 0}
        fresh = [tp for tp in tps if tp not in starts]
        if fresh:
            starts.update(await self._retrying("reading log starts", lambda: self._starts(fresh)))
        return starts

    async def _starts(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        try:
            readers = await self._end_readers()
            starts: dict[TopicPartition, int] = await readers[1].beginning_offsets(tps)
        except BaseException:
            await self._drop_end_readers()
            raise
        return starts

    async def _retrying(
        self, what: str, ask: Callable[[], Awaitable[dict[TopicPartition, int]]]
    ) -> dict[TopicPartition, int]:
        """``ask()`` until the broker answers. These questions run inside the rebalance
        callback, where an exception stops the worker (Faust crashes the app on it), and while
        the broker restarts every way of failing only means "no answer yet"."""
        delay = 0.2
        while True:
            try:
                return await ask()
            except Exception as exc:
                log.warning("%s failed (%r); retrying in %.1fs", what, exc, delay)
                if self._admin is not None:
                    with contextlib.suppress(Exception):
                        await self._admin.close()
                    self._admin = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def wait_until_settled(
        self, tps: list[TopicPartition], give_up_after: float | None = None
    ) -> list[TopicPartition]:
        """Wait until no transaction is open on ``tps`` (their last stable offset reaches their
        end); returns ``[]`` then. With ``give_up_after``, return the partitions still open
        once that many seconds passed with the broker answering.

        Otherwise wait on: after 2x the transaction timeout + 30 s (the broker aborts a dead
        producer's transaction after the transaction timeout; longer is a hanging transaction,
        or a broker still recovering) an error with what to do is logged every such period,
        and the wait goes on (reading offsets before it ends could forward records twice)."""
        s = self.settings
        patience = 2 * s.transaction_timeout + 30
        deadline = time.monotonic() + patience
        give_up_at = None if give_up_after is None else time.monotonic() + give_up_after
        warned = False
        while True:
            try:
                readers = await self._end_readers()
                stable = await readers[0].end_offsets(tps)
                ends = await readers[1].end_offsets(tps)
            except (KafkaError, TimeoutError, OSError) as exc:
                # No answer is no evidence of a hanging transaction: wait for the broker.
                log.warning("reading end offsets failed (%r); retrying", exc)
                await self._drop_end_readers()
                deadline = time.monotonic() + patience
                if give_up_after is not None:
                    give_up_at = time.monotonic() + give_up_after
                await asyncio.sleep(1)
                continue
            unsettled = {tp: (stable[tp], ends[tp]) for tp in tps if stable[tp] < ends[tp]}
            if not unsettled:
                if warned:
                    log.warning("the open transactions settled; going on")
                return []
            if give_up_at is not None and time.monotonic() > give_up_at:
                return sorted(unsettled)
            described = ", ".join(
                f"{tp.topic}-{tp.partition} (stable {lso} < end {end})"
                for tp, (lso, end) in sorted(unsettled.items())
            )
            if time.monotonic() > deadline:
                # Never give up: a worker stopped here would wait the same way after its
                # restart, and a broker still recovering its logs after a kill -9 (1,000+
                # partitions on a loaded machine) settles later than this (CI, F7).
                log.error(
                    "a transaction stays open on %s: the broker neither committed nor "
                    "aborted it (a hanging transaction, e.g. after an unclean broker "
                    "shutdown, or a broker still recovering). Still waiting; if it lasts, "
                    "kafka-transactions.sh find-hanging lists it: abort it only if the "
                    "broker rolled it back (docs/operations.md, a hanging transaction)",
                    described,
                )
                deadline = time.monotonic() + patience
            if not warned:
                log.warning(
                    "a transaction is still open on %s: waiting for the broker to finish "
                    "it before reading committed offsets",
                    described,
                )
                warned = True
            await asyncio.sleep(0.5)

    async def _end_readers(self) -> tuple[AIOKafkaConsumer, AIOKafkaConsumer]:
        """Two started readers, kept until an error or :meth:`close`: one sees the last stable
        offsets, the other the log ends."""
        if self._ends is None:
            self._ends = await self._new_end_readers()
        return self._ends

    async def _drop_end_readers(self) -> None:
        readers, self._ends = self._ends, None
        if readers is not None:
            await _stop_all(readers)

    async def _new_end_readers(self) -> tuple[AIOKafkaConsumer, AIOKafkaConsumer]:
        s = self.settings
        started: list[AIOKafkaConsumer] = []
        try:
            for isolation in ("read_committed", "read_uncommitted"):
                reader = AIOKafkaConsumer(
                    bootstrap_servers=s.bootstrap_servers,
                    isolation_level=isolation,
                    **s.kafka_client_kwargs(),
                )
                started.append(reader)
                await reader.start()
        except BaseException:
            await _stop_all(started)
            raise
        await asyncio.sleep(0)
        return started[0], started[1]


async def _stop_all(readers: Iterable[AIOKafkaConsumer]) -> None:
    for reader in readers:
        with contextlib.suppress(Exception):
            await reader.stop()
