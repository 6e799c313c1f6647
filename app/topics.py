"""The worker's topics: declared once here, created at start-up, checked for co-partitioning.

=================  ==========================================  ==================================
topic              key / value                                 written by
=================  ==========================================  ==================================
input              messageId / Segment-style JSON event        producers, the ingest API
repartition        messageId / the original value and headers  this worker (re-keyed records)
seen_ids changelog messageId / first-seen ms (compacted)       this worker, in the transaction
output (clean)     messageId / the first copy, unchanged       this worker, in the transaction
dead-letter        original key / original value + reason      this worker, in the transaction
=================  ==========================================  ==================================

All have ``DEDUPE_PARTITIONS`` partitions. The worker creates missing ones and refuses to start
when an existing one has another partition count: the state of id X lives in partition
murmur2(X) % N, so every topic on the path must agree on N.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from app.settings import Settings

log = logging.getLogger(__name__)


class TopicMismatch(RuntimeError):
    """An existing topic does not fit the worker's settings."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str
    config: dict[str, str]


def topic_specs(settings: Settings, changelog: str) -> list[TopicSpec]:
    """Every topic the worker reads or writes, with the configs it creates them with."""
    dlq_bytes = str(settings.dlq_max_message_bytes)
    return [
        TopicSpec(settings.input_topic, "input", {}),
        TopicSpec(settings.repartition_topic, "repartition", {"max.message.bytes": dlq_bytes}),
        TopicSpec(changelog, "changelog", {"cleanup.policy": "compact"}),
        TopicSpec(settings.output_topic, "output", {}),
        TopicSpec(settings.dlq_topic, "dead-letter", {"max.message.bytes": dlq_bytes}),
    ]


async def _partition_counts(
    admin: AIOKafkaAdminClient, names: list[str], created: set[str], timeout: float = 30.0
) -> dict[str, int]:
    """Partition count per topic. Topics created a moment ago may not show up in metadata at
    once (no leader yet): wait for them, up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        described = await admin.describe_topics(names)
        counts = {d["topic"]: len(d["partitions"]) for d in described if not d["error_code"]}
        pending = [n for n in created if not counts.get(n)]
        if not pending or time.monotonic() > deadline:
            return counts
        await asyncio.sleep(0.2)


async def ensure_topics(settings: Settings, changelog: str, *, timeout_ms: int = 30_000) -> None:
    """Create missing topics; raise :class:`TopicMismatch` if an existing one disagrees."""
    specs = topic_specs(settings, changelog)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers, request_timeout_ms=timeout_ms
    )
    try:
        await admin.start()
    except KafkaError as exc:
        raise TopicMismatch(
            f"cannot reach Kafka at {settings.bootstrap_servers} ({exc!r}); "
            "is the broker running? (make kafka-up starts a local one)"
        ) from exc
    try:
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        if missing:
            # another worker may create them at the same moment
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [
                        NewTopic(
                            s.name,
                            num_partitions=settings.partitions,
                            replication_factor=settings.replication_factor,
                            topic_configs=s.config,
                        )
                        for s in missing
                    ],
                    timeout_ms=timeout_ms,
                )
            for s in missing:
                log.info("created %s topic %r (%d partitions)", s.role, s.name, settings.partitions)
        counts = await _partition_counts(admin, [s.name for s in specs], {s.name for s in missing})
        problems = [
            f"{s.role} topic {s.name!r} has {counts.get(s.name, 0)} partitions, "
            f"DEDUPE_PARTITIONS is {settings.partitions}"
            for s in specs
            if counts.get(s.name) != settings.partitions
        ]
        if problems:
            raise TopicMismatch(
                "refusing to start: every topic must have the same partition count so that all "
                "copies of an id meet the same state:\n  " + "\n  ".join(problems)
            )
    finally:
        await admin.close()
