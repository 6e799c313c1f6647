"""Why a transaction cannot complete while brokers are down: the partitions it writes that have
fewer replicas in sync than their ``min.insync.replicas``.

With ``acks=all`` a partition below its minimum refuses every write (``NOT_ENOUGH_REPLICAS``);
aiokafka retries such a send until the commit's timeout, so all the commit sees is a timeout.
Asked at that moment, the brokers' metadata names the cause, and the worker can say it in one
line instead of leaving the operator to guess (the Java client surfaces the same error as
``NotEnoughReplicasException``; Kafka documents the trade-off under ``min.insync.replicas``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.structs import TopicPartition

if TYPE_CHECKING:
    from app.settings import Settings

#: The broker's default when a topic does not set it.
DEFAULT_MIN_INSYNC = 1


@dataclass(frozen=True)
class Shortfall:
    tp: TopicPartition
    in_sync: int
    replicas: int
    required: int

    def __str__(self) -> str:
        return (
            f"{self.tp.topic}-{self.tp.partition} has {self.in_sync} of {self.replicas} "
            f"replicas in sync, min.insync.replicas={self.required}"
        )


def shortfalls(
    described: Iterable[Mapping[str, Any]],
    min_insync: Mapping[str, int],
    tps: Iterable[TopicPartition],
) -> list[Shortfall]:
    """The partitions of ``tps`` short of their minimum, from a metadata answer
    (``describe_topics``) and each topic's ``min.insync.replicas``."""
    wanted = set(tps)
    out = []
    for topic in described:
        for p in topic["partitions"]:
            tp = TopicPartition(topic["topic"], p["partition"])
            required = min_insync.get(tp.topic, DEFAULT_MIN_INSYNC)
            if tp in wanted and len(p["isr"]) < required:
                out.append(Shortfall(tp, len(p["isr"]), len(p["replicas"]), required))
    return sorted(out, key=lambda s: (s.tp.topic, s.tp.partition))


class ReplicaCheck:
    """Asks the brokers which partitions are short; an admin client opened on first use."""

    def __init__(self, settings: Settings, timeout: float = 10.0) -> None:
        self.settings = settings
        self.timeout = timeout
        self._admin: AIOKafkaAdminClient | None = None

    async def short(self, tps: Iterable[TopicPartition]) -> list[Shortfall]:
        """The partitions of ``tps`` below their minimum; empty when the brokers do not
        answer within the timeout (no diagnosis is better than a wrong one)."""
        tps = list(tps)
        if not tps:
            return []
        try:
            return await asyncio.wait_for(self._ask(tps), self.timeout)
        except Exception:
            await self.close()
            return []

    async def _ask(self, tps: list[TopicPartition]) -> list[Shortfall]:
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(
                bootstrap_servers=self.settings.bootstrap_servers,
                **self.settings.kafka_client_kwargs(),
            )
            await self._admin.start()
        topics = sorted({tp.topic for tp in tps})
        described = await self._admin.describe_topics(topics)
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        min_insync: dict[str, int] = {}
        for response in await self._admin.describe_configs(resources):
            for _code, _message, _type, name, entries in response.resources:
                for entry in entries:
                    if entry[0] == "min.insync.replicas" and entry[1] is not None:
                        min_insync[name] = int(entry[1])
        return shortfalls(described, min_insync, tps)

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()
