"""The peers' recovery of the recovery benchmark's ids (bench/recovery.py): the throughput
benchmark's Quix Streams and Kafka Streams contenders each deduplicate every id once, which
fills their changelog, then start again on an empty state dir and rebuild their state from it.
Both restore as their libraries do (Kafka Streams: RocksDB write batches with the WAL off,
RocksDBStore's restore path; Quix Streams: its recovery manager), so they are the yardsticks of
the bulk restore."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from bench.recovery_changelog import ROOT
from bench.recovery_procs import stop, wait_for
from scripts.topic_reader import committed_offsets, end_offsets


async def produce_keys(
    bootstrap: str, topic: str, output: str, by_partition: dict[int, list[bytes]]
) -> None:
    """Each id once into a new topic, on the partition the worker's partitioner gives it; the
    output topic created beside it (Kafka Streams creates only its internal topics)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        partitions = len(by_partition)
        await admin.create_topics([NewTopic(t, partitions, 1) for t in (topic, output)])
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


def filled_then_restarted(
    name: str,
    module: str,
    bootstrap: str,
    tag: str,
    by_partition: dict[int, list[bytes]],
    root: Path,
    timeout: float,
    recovered: Callable[[str], bool],
) -> tuple[Path, float, float]:
    """Run contender ``module`` over every id once (its changelog filled), stop it, wipe its
    state dir and start it again until ``recovered(its log)``: the log, the process's start
    (monotonic) and the seconds from that start to its recovery."""
    source, output, group = f"{tag}-{name}-in", f"{tag}-{name}-out", f"{tag}-{name}"
    asyncio.run(produce_keys(bootstrap, source, output, by_partition))
    ends = asyncio.run(end_offsets(bootstrap, source))
    state = root / f"{name}-state"
    command = [
        sys.executable, "-m", module, "--bootstrap", bootstrap, "--input", source,
        "--output", output, "--partitions", str(len(by_partition)),
        "--state-dir", str(state), "--group", group,
    ]  # fmt: skip

    def alive(proc: subprocess.Popen[bytes], log: Path) -> None:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with status {proc.returncode}: see {log}")

    def caught_up() -> bool:
        alive(fill, root / f"{name}-fill.log")
        done = asyncio.run(committed_offsets(bootstrap, group))
        return all(done.get(TopicPartition(source, p), -1) >= end for p, end in ends.items())

    with (root / f"{name}-fill.log").open("ab") as out:
        fill = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    filled = wait_for(caught_up, timeout, f"{name}'s deduplication of every id")
    stop(fill)
    print(f"{name}: every id deduplicated (its changelog filled) in {filled:.1f}s", flush=True)
    shutil.rmtree(state)
    log = root / f"{name}-recovery.log"
    with log.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    text = lambda: log.read_text(errors="replace") if log.exists() else ""  # noqa: E731

    def done() -> bool:
        alive(proc, log)
        return recovered(text())

    total = wait_for(done, timeout, f"{name}'s recovery")
    stop(proc)
    return log, started, total


def quix_recovery(
    bootstrap: str, tag: str, by_partition: dict[int, list[bytes]], root: Path, timeout: float
) -> tuple[float, float]:
    """Quix Streams' recovery (bench/contenders/quix_dedup.py, exactly-once, RocksDB state):
    seconds from its log's "Beginning recovery check" to "Recovery process complete" (seen by
    polling the log), and from the process start to the latter."""
    begun: list[float] = []

    def recovered(text: str) -> bool:
        if not begun and "Beginning recovery check" in text:
            begun.append(time.monotonic())
        return "Recovery process complete" in text

    _log, started, total = filled_then_restarted(
        "quix", "bench.contenders.quix_dedup", bootstrap, tag, by_partition, root, timeout,
        recovered,
    )  # fmt: skip
    recovery = started + total - (begun[0] if begun else started)
    print(f"quix: recovered in {recovery:.1f}s ({total:.1f}s after its start)", flush=True)
    return recovery, total


RESTORE_START = re.compile(r"kstreams-dedup: restore-start (\S+) (\d+) (-?\d+) (-?\d+)")
RESTORE_END = re.compile(r"kstreams-dedup: restore-end (\S+) (\d+) (\d+)")


def kstreams_recovery(
    bootstrap: str, tag: str, by_partition: dict[int, list[bytes]], root: Path, timeout: float
) -> tuple[float, float]:
    """Kafka Streams' recovery (bench/contenders/kstreams_dedup.py, exactly_once_v2, a RocksDB
    window store): seconds from the first store partition's restore start to the last one's
    end, by the application's own restore listener (its monotonic clock), and from the process
    start to the last end. Fails if it restored another number of records than ids."""
    partitions = len(by_partition)

    def recovered(text: str) -> bool:
        return len({m.group(1) for m in RESTORE_END.finditer(text)}) >= partitions

    log, _started, total = filled_then_restarted(
        "kstreams", "bench.contenders.kstreams_dedup", bootstrap, tag, by_partition, root,
        timeout, recovered,
    )  # fmt: skip
    text = log.read_text(errors="replace")
    starts = [int(m.group(2)) for m in RESTORE_START.finditer(text)]
    ends = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in RESTORE_END.finditer(text)}
    restored = sum(n for _, n in ends.values())
    ids = sum(len(keys) for keys in by_partition.values())
    if restored != ids:
        raise RuntimeError(f"kstreams: restored {restored:,} records, not the {ids:,} ids: {log}")
    recovery = (max(t for t, _ in ends.values()) - min(starts)) / 1000
    print(f"kstreams: recovered in {recovery:.1f}s ({total:.1f}s after its start)", flush=True)
    return recovery, total
