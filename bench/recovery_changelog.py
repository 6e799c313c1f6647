"""The recovery benchmark's changelog (bench/recovery.py): the ids it holds, writing it as the
worker's transactions do, reading it back with a bare consumer (the limit) and with the bulk
restorer's own reader, and its size on the local broker's disk."""

from __future__ import annotations

import time
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from app.rules import partition_for
from app.settings import Settings
from app.worker.factory import RESTORE_FETCH_WAIT_MS, changelog_reader
from bench.scale_ids import uuid_like
from recovery.restore import FETCH_BYTES
from scripts.topic_reader import end_offsets
from tables.window import encode_entry

ROOT = Path(__file__).resolve().parents[1]
T0 = 1_790_000_000_000


def ids_for(count: int, partitions: int, uuids: bool = False) -> dict[int, list[bytes]]:
    """``count`` distinct 36-character ids, on the partitions the worker's partitioner gives.

    By default numbered ids (not UUID-shaped, kept as text) that sort in the order they are
    written, the kindest order for RocksDB; ``uuids``: random UUIDv4-shaped ids
    (:func:`bench.scale_ids.uuid_like`, 16 bytes on disk), in no order, as analytics.js and the
    Segment SDKs send them."""
    by: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(count):
        if uuids:
            key = uuid_like(i)
        else:
            key = f"{i:08x}-bench-4000-8000-{i * 2654435761 % (1 << 48):012x}".encode()
        by[partition_for(key, partitions)].append(key)
    return by


async def write_changelog(
    bootstrap: str,
    topic: str,
    by_partition: dict[int, list[bytes]],
    per_txn: int,
    compression: str,
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        config = {"cleanup.policy": "compact"}
        await admin.create_topics([NewTopic(topic, len(by_partition), 1, topic_configs=config)])
    finally:
        await admin.close()
    started = time.monotonic()
    seq = 0
    for partition, keys in sorted(by_partition.items()):
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"{topic}-writer-{partition}",
            linger_ms=5,
            max_batch_size=1 << 20,
            compression_type=None if compression == "none" else compression,
        )
        await producer.start()
        try:
            for i in range(0, len(keys), per_txn):
                async with producer.transaction():
                    for key in keys[i : i + per_txn]:
                        value = encode_entry(T0 + seq, seq)
                        seq += 1
                        await producer.send(topic, value, key=key, partition=partition)
        finally:
            await producer.stop()
    print(f"changelog written: {seq:,} records in {time.monotonic() - started:.1f}s", flush=True)


def changelog_consumer(settings: Settings) -> AIOKafkaConsumer:
    """aiokafka's consumer with the changelog reader's settings: committed records only, the
    same fetch sizes and wait, no group."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        **settings.kafka_client_kwargs(),
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES,
        fetch_max_wait_ms=RESTORE_FETCH_WAIT_MS,
    )


async def bare_read(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds a consumer with the restorer's settings takes to read ``topic`` to its end,
    partition after partition, writing nothing: the limit of a restore in this process."""
    reader = changelog_consumer(Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}))
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await reader.end_offsets(tps)
        started = time.monotonic()
        for tp in tps:
            reader.assign([tp])
            reader.seek(tp, 0)
            while await reader.position(tp) < ends[tp]:
                await reader.getmany(tp, timeout_ms=500)
        return time.monotonic() - started
    finally:
        await reader.stop()


async def batch_read(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds the bulk restorer's own reader (``recovery/reader.py``) takes to read
    ``topic`` to its end, partition after partition, writing nothing."""
    reader = changelog_reader(Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}))
    try:
        ends = await end_offsets(bootstrap, topic)
        started = time.monotonic()
        for p in range(partitions):
            tp, offset = TopicPartition(topic, p), 0
            while offset < ends[p]:
                offset = (await reader.fetch(tp, offset, ends[p])).next_offset
        return time.monotonic() - started
    finally:
        await reader.close()


def changelog_bytes(bootstrap: str, topic: str) -> int | None:
    """Bytes of ``topic``'s log segments on the broker's disk, when the broker is the local
    one of ``scripts/kafka-local.sh`` (its data dir under .cache/kafka-run/<port>); else None."""
    port = bootstrap.rsplit(":", 1)[-1]
    logs = ROOT / ".cache" / "kafka-run" / port / "logs"
    segments = list(logs.glob(f"{topic}-*/*.log"))
    return sum(f.stat().st_size for f in segments) if segments else None
