"""Deliberately broken workers, to prove the verifier catches what it must.

- ``forward_every_copy``: no dedup at all (every copy reaches the clean topic).
- ``offsets_before_send``: commits the input offsets of a batch, then "crashes" before sending
  it; the next run starts after those offsets, so the batch is lost.
"""

from __future__ import annotations

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import OffsetAndMetadata, TopicPartition

from app import rules
from scripts.topic_reader import partitions_of


async def _consumer(bootstrap: str, topic: str, group: str) -> AIOKafkaConsumer:
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    await consumer.start()
    tps = [TopicPartition(topic, p) for p in await partitions_of(consumer, topic)]
    consumer.assign(tps)
    return consumer


async def _route(producer: AIOKafkaProducer, out: str, dlq: str, record) -> None:  # type: ignore[no-untyped-def]
    checked = rules.inspect(record.value, max_event_bytes=32 * 1024, max_id_bytes=256)
    if isinstance(checked, rules.Invalid):
        await producer.send_and_wait(dlq, record.value, key=record.key)
    else:
        await producer.send_and_wait(out, record.value, key=checked.id_bytes)


async def forward_every_copy(bootstrap: str, src: str, out: str, dlq: str, group: str) -> None:
    consumer = await _consumer(bootstrap, src, group)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=2_000)
            if not batches:
                return
            for records in batches.values():
                for record in records:
                    await _route(producer, out, dlq, record)
            await consumer.commit()
    finally:
        await producer.stop()
        await consumer.stop()


async def offsets_before_send(
    bootstrap: str, src: str, out: str, dlq: str, group: str, crash_after_batches: int
) -> None:
    """Commit first, send second; stop ("crash") between the two after some batches."""
    consumer = await _consumer(bootstrap, src, group)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    seen: set[bytes] = set()
    batches_done = 0
    try:
        while True:
            batches = await consumer.getmany(timeout_ms=2_000, max_records=200)
            if not batches:
                return
            await consumer.commit(
                {tp: OffsetAndMetadata(recs[-1].offset + 1, "") for tp, recs in batches.items()}
            )
            batches_done += 1
            if batches_done == crash_after_batches:
                return  # crashed after committing, before sending
            for records in batches.values():
                for record in records:
                    key = record.key or b""
                    if key in seen:
                        continue
                    seen.add(key)
                    await _route(producer, out, dlq, record)
    finally:
        await producer.stop()
        await consumer.stop()
