"""What a component's principal may not do, asked of the broker and said one way for every
component (worker, verifier, Spark job): the principal, each denied operation and resource, and
where the ACLs are. app/admin/access.py builds the worker's full start-up probe on these."""

from __future__ import annotations

import asyncio

from aiokafka import AIOKafkaConsumer
from aiokafka.errors import TopicAuthorizationFailedError
from aiokafka.structs import TopicPartition

from envsettings.kafka_security import KafkaSecuritySettings


def denied_message(
    settings: KafkaSecuritySettings, denials: list[str], component: str = "worker"
) -> str:
    """The refusal of ``component``: who is denied what, and where the ACLs are."""
    listed = "\n  ".join(denials)
    return (
        f"refusing to start: Kafka denies {settings.kafka_principal} what this {component} "
        f"needs:\n  {listed}\n"
        f"Grant the {component}'s ACLs (python -m scripts.kafka_acls prints them for these "
        "settings; docs/security.md), or check KAFKA_SASL_USERNAME: each component has its "
        "own user."
    )


async def unreadable(
    settings: KafkaSecuritySettings, bootstrap_servers: str, topics: list[str]
) -> list[str]:
    """The topics of ``topics`` whose partition 0 the broker refuses to fetch to this
    principal (a fetch from the end: no record is read)."""
    denied: list[str] = []
    for topic in topics:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap_servers,
            enable_auto_commit=False,
            fetch_max_wait_ms=10,
            **settings.kafka_client_kwargs(),
        )
        await consumer.start()
        await asyncio.sleep(0)  # aiokafka 0.14: let its background task start
        try:
            tp = TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_end(tp)
            await consumer.getmany(tp, timeout_ms=200)
        except TopicAuthorizationFailedError:
            denied.append(topic)
        finally:
            await consumer.stop()
    return denied
