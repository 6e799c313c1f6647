"""Find where the one forwarded copy of an id went: its offset in the clean topic.

No extra state is kept for this: the clean record carries the key (the messageId) and the
Kafka timestamp of the input record, which is the id's first-seen time when
DEDUPE_TIME_SOURCE=kafka. So a lookup asks the broker for the first offset at or after that
time (ListOffsets by timestamp) and reads forward, read_committed, until it meets the key. With
DEDUPE_TIME_SOURCE=event the search starts DEDUPE_MAX_FUTURE_SKEW earlier.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer
from aiokafka.structs import TopicPartition

#: Records read past the first-seen time before giving up (the copy is normally the first).
SCAN_LIMIT = 5_000


class OutputLocator:
    """One read_committed consumer, assigned by hand, shared by lookups (one at a time)."""

    def __init__(self, bootstrap: str, topic: str, **client: Any) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self._client = client  # the security settings' aiokafka arguments
        self._consumer: AIOKafkaConsumer | None = None
        self._lock = asyncio.Lock()

    async def _ready(self) -> AIOKafkaConsumer:
        if self._consumer is None:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.bootstrap,
                **self._client,
                isolation_level="read_committed",
                enable_auto_commit=False,
            )
            await consumer.start()
            await asyncio.sleep(0)  # aiokafka 0.14: let its background task start
            self._consumer = consumer
        return self._consumer

    async def locate(self, key: bytes, partition: int, since_ms: int) -> int | None:
        """Offset of the record with ``key`` in ``partition``, searching from ``since_ms``."""
        async with self._lock:
            consumer = await self._ready()
            tp = TopicPartition(self.topic, partition)
            consumer.assign([tp])
            found = await consumer.offsets_for_times({tp: max(since_ms, 0)})
            start = found.get(tp)
            if start is None:
                return None
            consumer.seek(tp, start.offset)
            end = (await consumer.end_offsets([tp]))[tp]
            scanned = 0
            while scanned < SCAN_LIMIT and await consumer.position(tp) < end:
                batch = await consumer.getmany(tp, timeout_ms=1_000, max_records=500)
                for record in batch.get(tp, []):
                    scanned += 1
                    if record.key == key:
                        offset: int = record.offset
                        return offset
                if not batch:
                    break
            return None

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()
            self._consumer = None
