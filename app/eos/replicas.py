"""Why the worker stalls while brokers are down: the partitions it depends on that have fewer
replicas in sync than their ``min.insync.replicas``.

With ``acks=all`` such a partition refuses every write (``NOT_ENOUGH_REPLICAS``), and when it is
a partition of ``__transaction_state`` or ``__consumer_offsets`` no transaction can end and no
group can rebalance. aiokafka retries all of it until it times out, so the worker itself sees
only timeouts, a coordinator that does not answer, and a group that rebalances without end.
The brokers' metadata names the cause, so :class:`ReplicaWatch` asks it every
``WATCH_INTERVAL`` seconds and says it in one line and in the gauge
``dedupe_partitions_below_min_insync`` (the Java client surfaces the same cause as
``NotEnoughReplicasException``; Kafka documents the trade-off under ``min.insync.replicas``).
Nothing is lost meanwhile: the open transactions never commit and are re-read once the
brokers are back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from app.eos.metrics import BELOW_MIN_INSYNC

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)

#: The internal topics every transaction and every rebalance writes.
INTERNAL_TOPICS = ("__transaction_state", "__consumer_offsets")
#: The broker's default when a topic does not set it.
DEFAULT_MIN_INSYNC = 1
#: Seconds between two looks at the cluster, and between two repeats of the same complaint.
WATCH_INTERVAL = 10.0
REPEAT_EVERY = 60.0


@dataclass(frozen=True)
class Shortfall:
    topic: str
    partition: int
    in_sync: int
    replicas: int
    required: int

    def __str__(self) -> str:
        return (
            f"{self.topic}-{self.partition} has {self.in_sync} of {self.replicas} "
            f"replicas in sync, min.insync.replicas={self.required}"
        )


def shortfalls(
    described: Iterable[Mapping[str, Any]], min_insync: Mapping[str, int]
) -> list[Shortfall]:
    """The partitions below their minimum, from a metadata answer (``describe_topics``) and
    each topic's ``min.insync.replicas``."""
    out = [
        Shortfall(t["topic"], p["partition"], len(p["isr"]), len(p["replicas"]), required)
        for t in described
        if not t.get("error_code")
        for p in t["partitions"]
        if len(p["isr"]) < (required := min_insync.get(t["topic"], DEFAULT_MIN_INSYNC))
    ]
    return sorted(out, key=lambda s: (s.topic, s.partition))


def summary(short: list[Shortfall], most: int = 3) -> str:
    """The first ``most`` shortfalls, and how many more."""
    named = "; ".join(map(str, short[:most]))
    return named + (f"; and {len(short) - most} more" if len(short) > most else "")


class ReplicaWatch:
    """Looks at the partitions of ``topics()`` and the internal topics (see the module
    docstring); an admin client opened on first use."""

    def __init__(
        self, settings: EosSettings, topics: Callable[[], Iterable[str]], timeout: float = 10.0
    ) -> None:
        self.settings = settings
        self.topics = topics
        self.timeout = timeout
        self._admin: AIOKafkaAdminClient | None = None
        self._said: tuple[float, frozenset[str]] | None = None
        self._counted: set[str] = set()

    async def check(self) -> list[Shortfall] | None:
        """One look: the partitions short of replicas, or None when the brokers did not answer
        within the timeout (nothing is concluded then). A failed ask is tried once more with a
        new client: the old one may still be bound to a broker that died."""
        for attempt in (1, 2):
            try:
                short = await asyncio.wait_for(self._ask(), self.timeout)
            except Exception as exc:
                await self.close()
                log.info("replica watch: no answer from the brokers (%r), attempt %d", exc, attempt)
                continue
            self.report(short)
            return short
        return None

    async def _ask(self) -> list[Shortfall]:
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(
                bootstrap_servers=self.settings.bootstrap_servers,
                **self.settings.kafka_client_kwargs(),
            )
            await self._admin.start()
        topics = sorted({*self.topics(), *INTERNAL_TOPICS})
        described = await self._admin.describe_topics(topics)
        resources = [ConfigResource(ConfigResourceType.TOPIC, t) for t in topics]
        min_insync: dict[str, int] = {}
        for response in await self._admin.describe_configs(resources):
            for _code, _message, _type, name, entries in response.resources:
                for entry in entries:
                    if entry[0] == "min.insync.replicas" and entry[1] is not None:
                        min_insync[name] = int(entry[1])
        return shortfalls(described, min_insync)

    def report(self, short: list[Shortfall]) -> None:
        by_topic: dict[str, int] = {}
        for s in short:
            by_topic[s.topic] = by_topic.get(s.topic, 0) + 1
        for topic in self._counted - by_topic.keys():
            BELOW_MIN_INSYNC.labels(topic).set(0)
        for topic, n in by_topic.items():
            BELOW_MIN_INSYNC.labels(topic).set(n)
        self._counted = set(by_topic)
        now, names = time.monotonic(), frozenset(map(str, short))
        if not short:
            if self._said is not None:
                log.warning("every partition has enough replicas in sync again: resuming")
            self._said = None
            return
        if self._said is None or self._said[1] != names or now - self._said[0] > REPEAT_EVERY:
            log.error(
                "the cluster refuses writes: %d partitions have fewer replicas in sync than "
                "min.insync.replicas (%s): brokers are down. Transactions cannot end and the "
                "group cannot rebalance until enough brokers are back; nothing is committed "
                "or lost meanwhile",
                len(short),
                summary(short),
            )
            self._said = (now, names)

    async def close(self) -> None:
        if self._admin is not None:
            admin, self._admin = self._admin, None
            await admin.close()
