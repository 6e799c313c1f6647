"""Read a whole topic as it stands now, the way a downstream consumer would.

``read_topic`` reads every partition from the beginning up to the end offsets taken at the start
(the last stable offsets with ``read_committed``), so it returns exactly what a
``read_committed`` reader can see at that moment and never waits for later writes.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.structs import TopicPartition


@dataclass(frozen=True, slots=True)
class Record:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


async def start_consumer(**config: object) -> AIOKafkaConsumer:
    """A started consumer without a group. (aiokafka 0.14's ``stop()`` raises CancelledError
    when called before its background task ever ran; one loop turn after ``start()`` avoids it.)
    """
    consumer = AIOKafkaConsumer(**config)
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()  # a failed start leaves its client open
        raise
    await asyncio.sleep(0)
    return consumer


async def partitions_of(consumer: AIOKafkaConsumer, topic: str, timeout: float = 30) -> list[int]:
    """The partitions of ``topic``; raises LookupError when it does not exist and
    TopicAuthorizationFailedError at once when the broker denies this client Describe on it
    (an unauthorized topic has no partitions in the metadata: waiting would never end)."""
    deadline = time.monotonic() + timeout
    consumer._client.add_topic(topic)
    while True:
        partitions = consumer.partitions_for_topic(topic)
        if partitions:
            return sorted(partitions)
        if topic in consumer._client.cluster.unauthorized_topics:
            raise TopicAuthorizationFailedError(topic)
        if time.monotonic() > deadline:
            raise LookupError(f"topic {topic!r} does not exist")
        await consumer._client.force_metadata_update()
        if not consumer.partitions_for_topic(topic):
            await asyncio.sleep(0.2)  # a topic being created: ask again, not in a tight loop


async def end_offsets(
    bootstrap: str,
    topic: str,
    *,
    isolation_level: str = "read_committed",
    client: Mapping[str, Any] | None = None,
) -> dict[int, int]:
    """Per partition, the offset after the last record a read_committed reader can see (with
    ``isolation_level="read_uncommitted"``: the log end, open transactions included).
    ``client``: further aiokafka arguments (the security settings' ``kafka_client_kwargs()``)."""
    consumer = await start_consumer(
        bootstrap_servers=bootstrap, isolation_level=isolation_level, **(client or {})
    )
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        ends = await consumer.end_offsets(tps)
        return {tp.partition: off for tp, off in ends.items()}
    finally:
        await consumer.stop()


async def settled_ends(bootstrap: str, topic: str, timeout: float = 60) -> dict[int, int]:
    """Per partition, the read_committed end once it has reached the log end: the markers of
    every transaction ended so far are written. EndTxn (a producer's commit or abort) is
    answered once the coordinator has logged the outcome; the markers reach the partitions'
    leaders after that, so a read_committed read right after a commit can stop before the
    committed records. Raises AssertionError after ``timeout`` seconds: a transaction stays
    open."""
    deadline = time.monotonic() + timeout
    while True:
        stable = await end_offsets(bootstrap, topic)
        logged = await end_offsets(bootstrap, topic, isolation_level="read_uncommitted")
        if stable == logged:
            return stable
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{topic}: last stable offsets {stable} short of the log ends {logged} after "
                f"{timeout:g} s: a transaction stays open"
            )
        await asyncio.sleep(0.1)


async def committed_offsets(
    bootstrap: str, group: str, *, client: Mapping[str, Any] | None = None
) -> dict[TopicPartition, int]:
    """The offsets consumer group ``group`` has committed."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    await admin.start()
    try:
        result = await admin.list_consumer_group_offsets(group)
        return {tp: meta.offset for tp, meta in result.items() if meta is not None}
    finally:
        await admin.close()


async def read_topic(
    bootstrap: str,
    topic: str,
    *,
    isolation_level: str = "read_committed",
    timeout: float = 120.0,
    client: Mapping[str, Any] | None = None,
) -> list[Record]:
    """All records of ``topic`` up to its current end, in partition then offset order."""
    consumer = await start_consumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        isolation_level=isolation_level,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=16 * 1024 * 1024,
        fetch_max_bytes=64 * 1024 * 1024,
        **(client or {}),
    )
    try:
        tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        out: list[Record] = []
        remaining = {tp for tp in tps if ends[tp] > 0}
        for tp in list(remaining):
            if await consumer.position(tp) >= ends[tp]:
                remaining.discard(tp)
        deadline = time.monotonic() + timeout
        while remaining:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic!r} did not reach its end offsets {ends}")
            batches = await consumer.getmany(*remaining, timeout_ms=500)
            for tp, records in batches.items():
                for r in records:
                    if r.offset < ends[tp]:
                        out.append(
                            Record(
                                tp.partition,
                                r.offset,
                                r.key,
                                r.value,
                                tuple(r.headers or ()),
                                r.timestamp,
                            )
                        )
            for tp in list(remaining):
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
        out.sort(key=lambda r: (r.partition, r.offset))
        return out
    finally:
        await consumer.stop()


def read_topic_sync(bootstrap: str, topic: str, **kwargs: object) -> list[Record]:
    return asyncio.run(read_topic(bootstrap, topic, **kwargs))  # type: ignore[arg-type]
