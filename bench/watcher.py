"""The benchmark's view of a contender's output (bench/throughput.py): a read_committed consumer
that counts records and distinct ids and takes the arrival time of each."""

from __future__ import annotations

import time

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

from bench.contender_data import output_identity
from scripts.topic_reader import start_consumer


class Watcher:
    """A read_committed consumer of the output topic: counts, distinct ids, arrival times."""

    def __init__(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        self.consumer = consumer
        self.tps = tps
        self.total = 0
        self.seen: set[bytes] = set()
        self.expected_new = 0  # distinct ids of the backlog seen
        self.backlog: set[bytes] = set()
        self.first_at: float | None = None
        self.last_new_at: float | None = None
        self.sent_at: dict[bytes, float] = {}
        self.latencies: list[float] = []

    @classmethod
    async def start(cls, bootstrap: str, topic: str, partitions: int) -> Watcher:
        consumer = await start_consumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
        )
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        return cls(consumer, tps)

    async def poll(self, timeout_ms: int = 200) -> None:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=50_000)
        now = time.time()
        for records in batches.values():
            for r in records:
                self.total += 1
                if self.first_at is None:
                    self.first_at = now
                key = output_identity(r.key, r.headers)
                if key in self.seen:
                    continue
                self.seen.add(key)
                if key in self.backlog:
                    self.expected_new += 1
                    self.last_new_at = now
                sent = self.sent_at.pop(key, None)
                if sent is not None:
                    self.latencies.append(now - sent)

    async def drain(self, timeout: float = 60) -> None:
        """Read up to the current end (last stable offsets)."""
        ends = await self.consumer.end_offsets(self.tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = [await self.consumer.position(tp) for tp in self.tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, self.tps, strict=True)):
                return
            await self.poll(200)

    async def stop(self) -> None:
        await self.consumer.stop()
