"""What scripts/kafka_cluster.py asks a running cluster: whether it is whole (every broker
registered, no partition short of in-sync replicas), and a warm-up that creates Kafka's internal
topics before the first client needs them."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient


@dataclass
class Health:
    brokers: int
    under_replicated: int
    sample: list[str]


def health(bootstrap: str) -> Health:
    """Registered brokers and under-replicated partitions (internal topics included); a
    cluster that does not answer counts as no broker."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # "Unable connect" while down

    async def ask() -> Health:
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
        try:
            await admin.start()
            brokers = len((await admin.describe_cluster())["brokers"])
            short = [
                f"{t['topic']}-{p['partition']} isr={p['isr']}"
                for t in await admin.describe_topics()
                for p in t["partitions"]
                if len(p["isr"]) < len(p["replicas"]) or p["leader"] < 0
            ]
            return Health(brokers, len(short), short[:3])
        except Exception as exc:  # not answering yet (or any more): no broker
            return Health(0, 0, [repr(exc)])
        finally:
            await admin.close()

    return asyncio.run(ask())


def warm_up(bootstrap: str) -> None:
    """One InitProducerId (creates ``__transaction_state``) and one OffsetFetch (creates
    ``__consumer_offsets``), so the first test's transaction and group do not wait for them."""
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # retries while they are created

    async def run() -> None:
        p = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id="kafka-cluster-warmup",
            request_timeout_ms=30000,
        )
        await p.start()
        await p.stop()
        c = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id="kafka-cluster-warmup", request_timeout_ms=30000
        )
        await c.start()
        try:
            await c.committed(TopicPartition("kafka-cluster-warmup", 0))
        finally:
            await c.stop()

    asyncio.run(run())
