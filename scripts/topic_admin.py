"""Create and delete topics for the tests, the benchmarks and the demo: one admin client per
call, closed when it returns.

Topics made here have replication 1 unless told (the single test broker), and the configs
given; a test's topics share a fresh suffix, so ``delete_topics_containing`` removes exactly
one test's or one benchmark round's topics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import TopicAlreadyExistsError


async def create_topics(
    bootstrap: str,
    topics: Iterable[str],
    partitions: int,
    *,
    replication: int = 1,
    config: Mapping[str, str] | None = None,
    exist_ok: bool = False,
    client: Mapping[str, Any] | None = None,
) -> None:
    """Create ``topics``; with ``exist_ok`` a topic that exists already is left as it is."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, **(client or {}))
    await admin.start()
    try:
        new = [
            NewTopic(t, partitions, replication, topic_configs=dict(config or {})) for t in topics
        ]
        try:
            await admin.create_topics(new)
        except TopicAlreadyExistsError:
            if not exist_ok:
                raise
    finally:
        await admin.close()


async def delete_topics_containing(
    bootstrap: str, part: str, *, client: Mapping[str, Any] | None = None
) -> list[str]:
    """Delete every topic whose name holds ``part``; returns their names."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=30000, **(client or {})
    )
    await admin.start()
    try:
        doomed = [t for t in await admin.list_topics() if part in t]
        if doomed:
            await admin.delete_topics(doomed)
        return doomed
    finally:
        await admin.close()
