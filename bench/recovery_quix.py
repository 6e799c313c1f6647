"""Quix Streams' recovery of the recovery benchmark's ids (bench/recovery.py): the throughput
benchmark's Quix contender fills its changelog, then rebuilds its state from it."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
import time
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from bench.recovery_changelog import ROOT
from bench.recovery_procs import stop, wait_for
from scripts.topic_reader import committed_offsets, end_offsets


async def produce_keys(bootstrap: str, topic: str, by_partition: dict[int, list[bytes]]) -> None:
    """Each id once into a new topic, on the partition the worker's partitioner gives it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, len(by_partition), 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20)
    await producer.start()
    try:
        for partition, keys in sorted(by_partition.items()):
            for key in keys:
                await producer.send(topic, b"{}", key=key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def quix_recovery(
    bootstrap: str, tag: str, by_partition: dict[int, list[bytes]], root: Path, timeout: float
) -> tuple[float, float]:
    """Quix Streams' recovery of the same ids: the throughput benchmark's Quix contender
    (bench/contenders/quix_dedup.py, exactly-once, RocksDB state) deduplicates every id once,
    which fills its changelog; then it starts again on an empty state dir and rebuilds its
    store from that changelog. Seconds of that recovery (its log's "Beginning recovery
    check" to "Recovery process complete"), and from the process start to the latter."""
    source, group = f"{tag}-quix-in", f"{tag}-quix"
    asyncio.run(produce_keys(bootstrap, source, by_partition))
    ends = asyncio.run(end_offsets(bootstrap, source))
    state = root / "quix-state"
    command = [
        sys.executable, "-m", "bench.contenders.quix_dedup", "--bootstrap", bootstrap,
        "--input", source, "--output", f"{tag}-quix-out", "--partitions",
        str(len(by_partition)), "--state-dir", str(state), "--group", group,
    ]  # fmt: skip

    def caught_up() -> bool:
        done = asyncio.run(committed_offsets(bootstrap, group))
        return all(done.get(TopicPartition(source, p), -1) >= end for p, end in ends.items())

    with (root / "quix-fill.log").open("ab") as out:
        fill = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    filled = wait_for(caught_up, timeout, "Quix's deduplication of every id")
    stop(fill)
    print(f"quix: every id deduplicated (its changelog filled) in {filled:.1f}s", flush=True)
    shutil.rmtree(state)
    log = root / "quix-recovery.log"
    begun: list[float] = []

    def recovered() -> bool:
        text = log.read_text(errors="replace") if log.exists() else ""
        if not begun and "Beginning recovery check" in text:
            begun.append(time.monotonic())
        return "Recovery process complete" in text

    with log.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    total = wait_for(recovered, timeout, "Quix's recovery")
    stop(proc)
    recovery = started + total - (begun[0] if begun else started)
    print(f"quix: recovered in {recovery:.1f}s ({total:.1f}s after its start)", flush=True)
    return recovery, total
