"""The changelog reader: committed records of one changelog partition, read below aiokafka's
consumer. Every path that reads a changelog uses it: the bulk restore (``recovery/restore.py``)
and the standby follower (``recovery/follow.py``); Faust's recovery reads none
(``recovery/faust_adapter.py``).

aiokafka's consumer hands out every record as a ``ConsumerRecord`` (eleven fields, its headers
copied) through a generator, after a fetch loop of its own: 35% and 41% of a restore's time in
two profiles, and a restore needs only each record's key and value and where the fetch ended.
This reader sends Fetch requests itself through an aiokafka client (the same connections,
security settings and version negotiation as every other client of the worker), parses the
record batches with aiokafka's C parser and keeps ``(key, value)`` pairs, which is what makes a
restore faster than a consumer's (``bench/results-recovery.md`` has the figures of a whole
worker).

It reads as a ``read_committed`` consumer does, by the same rules as aiokafka's fetcher
(``PartitionRecords._unpack_records``): the broker returns records below the last stable offset
only, with the list of transactions aborted in the range; a batch of an aborted transaction is
skipped up to that producer's abort marker; control batches (commit and abort markers) are never
records. A batch whose checksum does not match raises (the restorer reads the partition again).

Errors raise, and the caller tries again after a backoff (``recovery/retry.py``); an error
that means the partition's leader moved asks for new metadata first. A fetch offset below the
partition's log start (records deleted from the changelog) goes on from the log start, with a
warning, as the consumer's ``auto_offset_reset="earliest"`` did.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from aiokafka import errors
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.offset import OffsetRequest
from aiokafka.record.control_record import ABORT_MARKER, ControlRecord
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

log = logging.getLogger(__name__)

#: Kafka's isolation level ``read_committed`` in a request.
READ_COMMITTED = 1
#: ListOffsets' timestamp that asks for a partition's log start.
EARLIEST = -2
#: Errors after which the partition's leader is looked up again before the next try.
LEADER_MOVED = (
    errors.NotLeaderForPartitionError,
    errors.UnknownTopicOrPartitionError,
    errors.LeaderNotAvailableError,
    errors.KafkaConnectionError,
    errors.NodeNotReadyError,
)


@dataclass
class Fetched:
    """The committed records of one fetch, in offset order."""

    records: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    #: ``(records so far, offset of the last of them)`` after each record batch that brought
    #: records: the places a write of these records may end.
    cuts: list[tuple[int, int]] = field(default_factory=list)
    #: Where the next fetch starts: past every batch this one returned (control batches and
    #: aborted ones included).
    next_offset: int = 0
    #: Offset of the first record in :attr:`records` (None: no record).
    first_offset: int | None = None
    #: The partition's last stable offset when the broker answered (-1: not known).
    stable: int = -1


class ChangelogReader:
    """Fetches committed records of changelog partitions (see the module docstring).

    ``new_client`` makes an unstarted client with the cluster's settings; the reader bootstraps
    it on first use and keeps it until :meth:`close`. Its users share it: aiokafka's client
    carries concurrent requests on one connection."""

    def __init__(
        self,
        new_client: Callable[[], AIOKafkaClient],
        *,
        fetch_bytes: int,
        max_wait_ms: int,
    ) -> None:
        self._new_client = new_client
        self._fetch_bytes = fetch_bytes
        self._max_wait_ms = max_wait_ms
        self._client: AIOKafkaClient | None = None
        #: One bootstrap at a time: two users' first fetches would otherwise start two clients.
        self._starting = asyncio.Lock()

    async def close(self) -> None:
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()

    async def _started(self) -> AIOKafkaClient:
        async with self._starting:
            if self._client is None:
                client = self._new_client()
                await client.bootstrap()
                self._client = client
            return self._client

    async def _leader(self, client: AIOKafkaClient, tp: TopicPartition) -> int:
        node: int | None = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            await client.add_topic(tp.topic)
            await client.force_metadata_update()
            node = client.cluster.leader_for_partition(tp)
        if node is None or node < 0:
            raise errors.LeaderNotAvailableError(f"no leader known for {tp.topic}-{tp.partition}")
        return node

    async def fetch(
        self, tp: TopicPartition, offset: int, end: int, *, max_wait_ms: int | None = None
    ) -> Fetched:
        """The committed records of ``tp`` from ``offset`` on, below ``end``: one fetch of at
        most ``fetch_bytes`` (at least one whole batch). ``max_wait_ms``: how long the broker
        may hold the fetch for records it does not have yet (default: the reader's)."""
        client = await self._started()
        try:
            node = await self._leader(client, tp)
            request = FetchRequest(
                self._max_wait_ms if max_wait_ms is None else max_wait_ms,
                1,
                self._fetch_bytes,
                READ_COMMITTED,
                [(tp.topic, [(tp.partition, offset, self._fetch_bytes)])],
            )
            response = await client.send(node, request)
            return await self._parse(client, response, tp, offset, end)
        except LEADER_MOVED:
            client.force_metadata_update()
            raise

    async def _parse(
        self, client: AIOKafkaClient, response: Any, tp: TopicPartition, offset: int, end: int
    ) -> Fetched:
        for topic, partitions in response.topics:
            for partition, error_code, _highwater, *data in partitions:
                if (topic, partition) != (tp.topic, tp.partition):
                    continue
                error = errors.for_code(error_code)
                if error is errors.OffsetOutOfRangeError:
                    return Fetched(next_offset=await self._log_start(client, tp, offset))
                if error is not errors.NoError:
                    raise error(f"fetching {tp.topic}-{tp.partition} at offset {offset}")
                # v11: [lso, log_start, aborted, preferred replica, records];
                # v5-v10: [lso, log_start, aborted, records]; v4: [lso, aborted, records].
                aborted = data[2] if response.API_VERSION >= 11 else data[-2]
                found = unpack(MemoryRecords(data[-1]), aborted or [], tp, offset, end)
                found.stable = int(data[0])
                return found
        raise errors.KafkaError(f"the fetch response has no data for {tp.topic}-{tp.partition}")

    async def _log_start(self, client: AIOKafkaClient, tp: TopicPartition, offset: int) -> int:
        node = await self._leader(client, tp)
        request = OffsetRequest(-1, READ_COMMITTED, [(tp.topic, [(tp.partition, EARLIEST)])])
        response = await client.send(node, request)
        for _topic, partitions in response.topics:
            for _partition, error_code, *info in partitions:
                error = errors.for_code(error_code)
                if error is not errors.NoError:
                    raise error(f"looking up the log start of {tp.topic}-{tp.partition}")
                start = int(info[-1])
                if start <= offset:
                    raise errors.OffsetOutOfRangeError(
                        f"offset {offset} of {tp.topic}-{tp.partition} is out of range (the log "
                        f"starts at {start})"
                    )
                log.warning(
                    "%s-%d: the changelog starts at offset %d, after the %d asked for (records "
                    "were deleted from it); reading on from %d",
                    tp.topic,
                    tp.partition,
                    start,
                    offset,
                    start,
                )
                return start
        raise errors.KafkaError(f"no log start offset for {tp.topic}-{tp.partition}")


#: A record's (key, value).
_KEY_VALUE = attrgetter("key", "value")


def unpack(
    batches: Any, aborted: list[tuple[int, int]], tp: TopicPartition, offset: int, end: int
) -> Fetched:
    """The committed records of ``batches`` (a fetch's ``MemoryRecords``) at or after ``offset``
    and below ``end``. ``aborted``: the fetch's ``(producer id, first offset)`` of every
    transaction aborted in its range."""
    pending = sorted(aborted, key=lambda a: a[1])
    aborting: set[int] = set()
    found = Fetched(next_offset=offset)
    records, cuts = found.records, found.cuts
    append = records.append
    while batches.has_next():
        batch = batches.next_batch()
        if not batch.validate_crc():
            raise errors.CorruptRecordException(
                f"{tp.topic}-{tp.partition}: the batch at offset {batch.base_offset} does not "
                "match its checksum"
            )
        found.next_offset = batch.next_offset
        producer = batch.producer_id
        while pending and pending[0][1] <= batch.base_offset:
            aborting.add(pending.pop(0)[0])
        if batch.is_control_batch:
            if ControlRecord.parse(next(batch).key) == ABORT_MARKER:
                aborting.discard(producer)
            continue
        if batch.is_transactional and producer in aborting:
            continue
        if batch.base_offset >= offset and batch.next_offset <= end:
            # The whole batch is wanted (all but the first and last of a restore): its records
            # in one C-level pass, no per-record bytecode (but the fetch's first record, whose
            # offset is kept).
            before = len(records)
            if found.first_offset is not None:
                records.extend(map(_KEY_VALUE, batch))
            else:
                batch_records = iter(batch)  # decompresses it
                first = next(batch_records, None)
                if first is not None:
                    found.first_offset = first.offset
                    append((first.key, first.value))
                # The rest through the batch's own next() (a second iter() on it is refused).
                records.extend(map(_KEY_VALUE, iter(batch_records.__next__, None)))
            if len(records) > before:
                # Through the batch's last offset, whether or not compaction removed its record.
                cuts.append((len(records), batch.next_offset - 1))
            continue
        last = None
        for record in batch:
            at = record.offset
            if at < offset:
                continue  # a batch that began before the fetch offset
            if at >= end:
                break
            append((record.key, record.value))
            if found.first_offset is None:
                found.first_offset = at
            last = at
        if last is not None:
            cuts.append((len(records), last))
    return found
