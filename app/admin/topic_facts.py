"""What the brokers say about the worker's topics, for the rule of :mod:`app.admin.topic_safety`:
the broker count (cluster metadata), each topic's replicas and in-sync replicas (topic
metadata) and its effective ``min.insync.replicas``, ``unclean.leader.election.enable``,
``cleanup.policy`` and ``retention.ms`` (DescribeConfigs: the topic's own value, else the
broker's or Kafka's default, as Kafka Streams' InternalTopicManager reads them)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from app.admin.topic_safety import TopicFacts
from envsettings.kafka_security import TOPIC_AUTHORIZATION_FAILED

#: The configs the rule reads, and Kafka's defaults for a broker that does not report one.
CONFIG_DEFAULTS = {
    "min.insync.replicas": "1",
    "unclean.leader.election.enable": "false",
    "cleanup.policy": "delete",
    "retention.ms": "604800000",
}


class FactsUnavailable(RuntimeError):
    """The brokers did not describe every topic in time."""


class ConfigsDenied(RuntimeError):
    """The principal may not read these topics' configs (no DescribeConfigs ACL)."""

    def __init__(self, topics: list[str]) -> None:
        super().__init__(f"DescribeConfigs denied on {topics}")
        self.topics = topics


async def broker_count(admin: AIOKafkaAdminClient) -> int:
    """How many brokers the cluster metadata lists (registered, not fenced)."""
    return len((await admin.describe_cluster())["brokers"])


async def _configs(admin: AIOKafkaAdminClient, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """Each topic's configs the rule reads; topics the broker reported an error for are left
    out (a topic created a moment ago may not be known to every broker yet), except a denial,
    which no retry mends: :class:`ConfigsDenied`."""
    wanted = list(CONFIG_DEFAULTS)
    responses = await admin.describe_configs(
        [ConfigResource(ConfigResourceType.TOPIC, n, configs=dict.fromkeys(wanted)) for n in names]
    )
    out: dict[str, dict[str, str]] = {}
    denied = []
    for response in responses:
        for error_code, _message, _type, name, entries in response.resources:
            denied += [name] if error_code == TOPIC_AUTHORIZATION_FAILED else []
            if error_code:
                continue
            found = {e[0]: e[1] for e in entries if e[1] is not None}
            out[name] = {k: found.get(k, default) for k, default in CONFIG_DEFAULTS.items()}
    if denied:
        raise ConfigsDenied(sorted(denied))
    return out


def _replicas(partitions: list[dict[str, Any]]) -> tuple[int, int, int]:
    """(fewest replicas, fewest in-sync replicas, partitions with fewer in sync than replicas)."""
    replicas = [len(p["replicas"]) for p in partitions]
    in_sync = [len(p["isr"]) for p in partitions]
    under = sum(1 for r, i in zip(replicas, in_sync, strict=True) if i < r)
    return min(replicas), min(in_sync), under


async def topic_facts(
    admin: AIOKafkaAdminClient, roles: dict[str, str], timeout: float = 30.0
) -> list[TopicFacts]:
    """The facts of every topic in ``roles`` (name -> role), in that order. Retries for up to
    ``timeout`` seconds while some topic is not described yet (just created); raises
    :class:`FactsUnavailable` after."""
    deadline = time.monotonic() + timeout
    names = list(roles)
    while True:
        described = {
            d["topic"]: d["partitions"]
            for d in await admin.describe_topics(names)
            if not d["error_code"] and d["partitions"]
        }
        configs = await _configs(admin, names)
        missing = [n for n in names if n not in described or n not in configs]
        if not missing:
            break
        if time.monotonic() > deadline:
            raise FactsUnavailable(f"the brokers did not describe topics {missing} in {timeout}s")
        await asyncio.sleep(0.2)
    out = []
    for name in names:
        c = configs[name]
        replication, in_sync, under = _replicas(described[name])
        out.append(
            TopicFacts(
                name=name,
                role=roles[name],
                replication=replication,
                in_sync=in_sync,
                under_replicated=under,
                min_insync=int(c["min.insync.replicas"]),
                unclean_election=c["unclean.leader.election.enable"].lower() == "true",
                cleanup_policy=c["cleanup.policy"],
                retention_ms=int(c["retention.ms"]),
            )
        )
    return out
