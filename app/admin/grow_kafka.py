"""The broker side of ``python -m app grow`` (``app/admin/grow.py``): who is in the worker group,
the topics' partition counts, waiting for a changelog partition to settle, and reading one
changelog partition's live entries (read committed) into the moves it needs."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from aiokafka import AIOKafkaConsumer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.structs import TopicPartition

from app.admin.grow_plan import Move, homes


async def started_consumer(**config: object) -> AIOKafkaConsumer:
    """A started consumer without a group (one loop turn after ``start()``: aiokafka's ``stop()``
    raises CancelledError when its background task never ran; ``scripts/topic_reader.py``)."""
    consumer = AIOKafkaConsumer(**config)
    try:
        await consumer.start()
    except BaseException:
        await consumer.stop()
        raise
    await asyncio.sleep(0)
    return consumer


async def group_members(admin: AIOKafkaAdminClient, group: str) -> list[str]:
    """The client id and host of each live member of consumer group ``group`` (DescribeGroups:
    a worker killed with kill -9 stays a member until its session timeout)."""
    members: list[str] = []
    for response in await admin.describe_consumer_groups([group]):
        for described in response.groups:
            if described[1] != group:
                continue
            # (member_id, [group_instance_id,] client_id, client_host, metadata, assignment)
            for member in described[5]:
                client_id, host = member[-4], member[-3]
                members.append(f"{client_id} on {host}")
    return members


async def partition_counts(admin: AIOKafkaAdminClient, topics: Sequence[str]) -> dict[str, int]:
    """Partition count per existing topic of ``topics`` (a missing topic is left out)."""
    described = await admin.describe_topics(list(topics))
    return {d["topic"]: len(d["partitions"]) for d in described if not d["error_code"]}


async def wait_for_counts(
    admin: AIOKafkaAdminClient, topics: Sequence[str], target: int, timeout: float = 60.0
) -> None:
    """Until the metadata shows ``target`` partitions for every topic (grown a moment ago)."""
    deadline = time.monotonic() + timeout
    while True:
        counts = await partition_counts(admin, topics)
        if all(counts.get(t) == target for t in topics):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"the topics did not show {target} partitions: {counts}")
        await asyncio.sleep(0.5)


async def wait_settled(
    committed: AIOKafkaConsumer,
    uncommitted: AIOKafkaConsumer,
    tp: TopicPartition,
    timeout: float,
) -> None:
    """Until no transaction is open in ``tp`` (its last stable offset reached its log end):
    one left open by a worker or an earlier run killed with kill -9 ends when the broker
    aborts it (its transaction timeout). Entries written after it would stay unseen until
    then, so the partition is read only once it settled."""
    deadline = time.monotonic() + timeout
    while True:
        stable = (await committed.end_offsets([tp]))[tp]
        end = (await uncommitted.end_offsets([tp]))[tp]
        if stable >= end:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{tp.topic}-{tp.partition} still holds an open transaction after {timeout:.0f}s "
                f"(last stable offset {stable}, log end {end}): a worker killed with kill -9 "
                "left it; run again once its transaction timeout passed"
            )
        await asyncio.sleep(0.5)


async def misplaced_entries(
    consumer: AIOKafkaConsumer, tp: TopicPartition, target: int, timeout: float = 600.0
) -> tuple[int, list[Move]]:
    """Read ``tp`` from its start to its last stable offset (``consumer`` reads committed) and
    return (live entries read, the moves of those whose home under ``target`` partitions is
    another partition). Later records of a key replace earlier ones; a tombstone ends it."""
    consumer.assign([tp])
    await consumer.seek_to_beginning(tp)
    end = (await consumer.end_offsets([tp]))[tp]
    live: set[bytes] = set()
    moving: dict[bytes, Move] = {}
    deadline = time.monotonic() + timeout
    while await consumer.position(tp) < end:
        if time.monotonic() > deadline:
            raise TimeoutError(f"reading {tp.topic}-{tp.partition} did not reach offset {end}")
        fetched = (await consumer.getmany(tp, timeout_ms=500)).get(tp, [])
        records = [r for r in fetched if r.offset < end and r.key is not None]
        for r, home in zip(records, homes([r.key for r in records], target), strict=True):
            key = r.key
            assert key is not None
            if home is None:
                continue  # a record of the partition itself (source offsets), not an id
            if r.value is None:
                live.discard(key)
                moving.pop(key, None)
                continue
            live.add(key)
            if home != tp.partition:
                headers = tuple(r.headers or ())
                moving[key] = Move(key, r.value, headers, r.timestamp, tp.partition, home)
            else:
                moving.pop(key, None)
    return len(live), list(moving.values())
