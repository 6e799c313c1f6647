"""The worker's topics: declared once here, created at start-up, checked for co-partitioning.

=================  ==========================================  ==================================
topic              key / value                                 written by
=================  ==========================================  ==================================
input              messageId / Segment-style JSON event        producers, the ingest API
repartition        messageId / the original value and headers  this worker (re-keyed records)
seen_ids changelog messageId / first-seen ms (compacted)       this worker, in the transaction
producer_seqs ch.  producer / highest sequence (compacted)     this worker, in the transaction
output (clean)     messageId / the first copy, unchanged       this worker, in the transaction
dead-letter        original key / original value + reason      this worker, in the transaction
=================  ==========================================  ==================================

All have ``DEDUPE_PARTITIONS`` partitions, created when missing; another count on an existing
one stops the worker: the state of id X lives in partition murmur2(X) % N, so every topic on
the path agrees on N (``python -m app grow``, ``app/admin/grow.py``, raises it for all, ids moved).

The consumer group and the changelog are named from ``DEDUPE_APP_ID`` alone, so they belong to
one pipeline (one input topic). Before anything else the worker reads the group's committed
offsets (one OffsetFetch): offsets for a topic it does not read mean another pipeline's worker
ran under this app id, and sharing its group and seen ids would drop this pipeline's events as
repeats of the other's, so it refuses to start (:func:`foreign_topics`).

Topics it creates get ``DEDUPE_REPLICATION_FACTOR`` replicas and ``DEDUPE_MIN_INSYNC_REPLICAS``
(auto: 3 and 2 on three or more brokers) and unclean leader election off. Then every topic it
uses, created or found, is checked by :mod:`app.admin.topic_safety`: one message names each unsafe
value, and the worker refuses to start when exactly-once cannot hold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import KafkaError, TopicAlreadyExistsError

from app.admin import access
from app.admin.topic_facts import ConfigsDenied, FactsUnavailable, broker_count, topic_facts
from app.admin.topic_safety import (
    creation_problems,
    message,
    unsafe,
    wanted_min_insync,
    wanted_replication,
)
from app.settings import Settings
from envsettings.kafka_access import denied_message
from envsettings.kafka_connection import connection_problem

log = logging.getLogger(__name__)


class TopicMismatch(RuntimeError):
    """An existing topic does not fit the worker's settings."""


class AppIdInUse(TopicMismatch):
    """The app id's consumer group (and so its seen ids) belongs to another input topic."""


@dataclass(frozen=True)
class TopicSpec:
    name: str
    role: str
    config: dict[str, str]


def topic_specs(
    settings: Settings, changelog: str, more_changelogs: Sequence[str] = ()
) -> list[TopicSpec]:
    """Every topic the worker reads or writes, with the configs it creates them with."""
    dlq_bytes = str(settings.dlq_max_message_bytes)
    return [
        TopicSpec(settings.input_topic, "input", {}),
        TopicSpec(settings.repartition_topic, "repartition", {"max.message.bytes": dlq_bytes}),
        TopicSpec(changelog, "changelog", {"cleanup.policy": "compact"}),
        *(TopicSpec(c, "changelog", {"cleanup.policy": "compact"}) for c in more_changelogs),
        TopicSpec(settings.output_topic, "output", {}),
        TopicSpec(settings.dlq_topic, "dead-letter", {"max.message.bytes": dlq_bytes}),
    ]


def foreign_topics(settings: Settings, committed: set[str]) -> list[str]:
    """The topics the app id's group committed offsets for that this worker does not read
    (its input and repartition topics), sorted; empty when the group is this pipeline's."""
    return sorted(committed - {settings.input_topic, settings.repartition_topic})


def app_id_in_use_message(settings: Settings, changelog: str, foreign: list[str]) -> str:
    """Why a worker whose app id's group committed offsets for ``foreign`` does not start."""
    listed = ", ".join(repr(t) for t in foreign)
    return (
        f"refusing to start: DEDUPE_APP_ID={settings.app_id!r} belongs to another pipeline. "
        f"Its consumer group {settings.app_id!r} has committed offsets for {listed}, and this "
        f"worker reads DEDUPE_INPUT_TOPIC={settings.input_topic!r} (and "
        f"{settings.repartition_topic!r}). The group and the seen ids in {changelog!r} are "
        "named from the app id alone: sharing them would drop this pipeline's events as "
        "repeats of the other pipeline's. Give each pipeline its own DEDUPE_APP_ID (e.g. "
        f"DEDUPE_APP_ID={settings.app_id}-{settings.input_topic}). If this pipeline moved "
        "from that topic to this one on purpose and should keep its seen ids, delete the "
        "group's offsets of the old topic first (kafka-consumer-groups.sh --bootstrap-server "
        f"... --group {settings.app_id} --delete-offsets --topic <old topic>)."
    )


async def committed_topics(
    admin: AIOKafkaAdminClient, group: str, timeout: float = 30.0
) -> set[str]:
    """The topics ``group`` has committed offsets for. Retriable errors (the coordinator not
    available yet on a new cluster, moving, or loading after a broker restart) are retried for
    up to ``timeout`` seconds, as the worker's own consumer would."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            offsets = await admin.list_consumer_group_offsets(group)
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise TopicMismatch(
                    f"cannot read the committed offsets of consumer group {group!r} "
                    f"(DEDUPE_APP_ID): {exc!r}"
                ) from exc
            await asyncio.sleep(0.5)
            continue
        # aiokafka raises errors of single partitions; an error of the whole group in a v2+
        # answer comes back as no offsets at all, so such a moment passes the check unseen.
        return {tp.topic for tp, meta in offsets.items() if meta.offset >= 0}


async def _check_app_id_owner(
    admin: AIOKafkaAdminClient, settings: Settings, changelog: str
) -> None:
    """Raise :class:`AppIdInUse` when the app id's group committed offsets for topics this
    worker does not read. A group that never committed (a new app id) passes."""
    committed = await committed_topics(admin, settings.app_id)
    foreign = foreign_topics(settings, committed)
    if foreign:
        raise AppIdInUse(app_id_in_use_message(settings, changelog, foreign))


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


async def ensure_topics(
    settings: Settings,
    changelog: str,
    *,
    more_changelogs: Sequence[str] = (),
    timeout_ms: int = 30_000,
) -> int:
    """Check that the app id's group is this pipeline's (:class:`AppIdInUse` if not), create
    missing topics, and raise :class:`TopicMismatch` if an existing one disagrees or is unsafe
    (:mod:`app.admin.topic_safety`). ``changelog`` is the seen ids' changelog, ``more_changelogs``
    those of the other tables. Returns the replication factor topics are created with."""
    specs = topic_specs(settings, changelog, more_changelogs)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        request_timeout_ms=timeout_ms,
        **settings.kafka_client_kwargs(),
    )
    try:
        await admin.start()
    except KafkaError as exc:
        why = await connection_problem(settings, settings.bootstrap_servers)
        # only where no broker answers: one that refuses this client needs other settings
        hint = "; make kafka-up starts a local broker" if why.startswith("no broker") else ""
        raise TopicMismatch(
            f"cannot reach Kafka at {settings.bootstrap_servers}: {why} ({exc!r}{hint})"
        ) from exc
    try:
        await access.check_group(admin, settings)
        await _check_app_id_owner(admin, settings, changelog)
        existing = set(await admin.list_topics())
        missing = [s for s in specs if s.name not in existing]
        brokers = await broker_count(admin)
        replication = wanted_replication(settings, brokers)
        safe = {
            "min.insync.replicas": str(wanted_min_insync(settings, replication)),
            "unclean.leader.election.enable": "false",
        }
        if missing and (cannot := creation_problems(brokers, settings)):
            raise TopicMismatch("refusing to start: " + "; ".join(cannot))
        if missing:
            # another worker may create them at the same moment
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [
                        NewTopic(
                            s.name,
                            num_partitions=settings.partitions,
                            replication_factor=replication,
                            topic_configs=s.config | safe,
                        )
                        for s in missing
                    ],
                    timeout_ms=timeout_ms,
                )
            for s in missing:
                log.info(
                    "created %s topic %r (%d partitions, replication %d, min.insync.replicas %s)",
                    *(s.role, s.name, settings.partitions, replication),
                    safe["min.insync.replicas"],
                )
        await access.check_visible(admin, settings, [s.name for s in specs])
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
        await _check_safety(admin, settings, specs, brokers)
        changelogs = [changelog, *more_changelogs]
        read = [settings.input_topic, settings.repartition_topic, *changelogs]
        write = [settings.output_topic, settings.dlq_topic, settings.repartition_topic, *changelogs]
        await access.check_read_write(settings, read, write)
    finally:
        await admin.close()
    return replication


async def _check_safety(
    admin: AIOKafkaAdminClient, settings: Settings, specs: list[TopicSpec], brokers: int
) -> None:
    """Raise :class:`TopicMismatch` naming every unsafe topic value when one of them breaks
    exactly-once; log them as one warning when they only weaken it."""
    try:
        facts = await topic_facts(admin, {s.name: s.role for s in specs})
    except ConfigsDenied as exc:
        denials = [f"DescribeConfigs on topic {t!r}" for t in exc.topics]
        raise access.AccessDenied(denied_message(settings, denials)) from None
    except (KafkaError, FactsUnavailable) as exc:
        if isinstance(exc, KafkaError) and exc.retriable:
            raise  # a broker failing over at start-up: the caller's ``retrying`` waits it out
        raise TopicMismatch(f"cannot check the topics' replication and configs: {exc!r}") from exc
    problems = unsafe(facts, brokers, settings)
    if any(p.refuse for p in problems):
        raise TopicMismatch(message(problems))
    if problems:
        log.warning("%s", message(problems))


#: Kafka's default ``delete.retention.ms`` (24 h), for a topic that does not override it.
DEFAULT_DELETE_RETENTION_MS = 86_400_000


async def delete_retention_ms(settings: Settings, topic: str, timeout_ms: int = 30_000) -> int:
    """The topic's ``delete.retention.ms`` as the broker reports it (its own value, the
    broker's default, or Kafka's): how long a compacted topic keeps a tombstone. Raises
    :class:`TopicMismatch` when the broker cannot be reached or does not know the topic."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers,
        request_timeout_ms=timeout_ms,
        **settings.kafka_client_kwargs(),
    )
    try:
        await admin.start()
        responses = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    except KafkaError as exc:
        raise TopicMismatch(
            f"cannot read the configuration of topic {topic!r} at "
            f"{settings.bootstrap_servers}: {exc!r}"
        ) from exc
    finally:
        await admin.close()
    for response in responses:
        for error_code, error_message, _type, name, entries in response.resources:
            if name != topic:
                continue
            if error_code:
                raise TopicMismatch(
                    f"cannot read the configuration of topic {topic!r}: error {error_code} "
                    f"{error_message or ''}".rstrip()
                )
            for entry in entries:
                if entry[0] == "delete.retention.ms" and entry[1] is not None:
                    return int(entry[1])
    return DEFAULT_DELETE_RETENTION_MS
