"""Whether the topics the worker uses can keep exactly-once on the cluster they live on.

Kafka Streams creates its internal topics with ``replication.factor`` (default -1: the broker's
``default.replication.factor``, which is 1 unless the cluster sets it) and, before it runs,
validates the existing ones: partition count and cleanup policy, every misconfiguration of
every topic collected into one result (apache/kafka streams/.../StreamsConfig.java
``REPLICATION_FACTOR_CONFIG``, InternalTopicManager.java ``validate``). The worker does the
same and checks more, because one broker's loss must not lose a committed transaction:

=========================================  =======  =============================================
what the broker reports                     outcome  why
=========================================  =======  =============================================
changelog's cleanup.policy without compact  refuse   deleted segments take seen ids with them
changelog compact,delete, short retention   refuse   ids still inside the window vanish
unclean.leader.election.enable=true, RF>=2  refuse   an out-of-sync replica may lead and drop a
                                                     committed transaction
min.insync.replicas > replication           refuse   no acks=all write can ever succeed
replication 1 on >= 2 brokers               refuse   unless DEDUPE_REPLICATION_FACTOR=1 is set
                                                     explicitly (then a warning)
replication below the wanted one            warn     fewer broker losses survived
min.insync.replicas 1 (or below wanted),    warn     acks=all is acknowledged by one replica
replication >= 2
fewer in-sync replicas than replicas        warn     the topic is under-replicated right now
=========================================  =======  =============================================

:func:`unsafe` is the rule (pure, table-tested); :mod:`app.admin.topics` gathers the facts and
raises or logs :func:`message`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from envsettings import parse_count

if TYPE_CHECKING:
    from app.settings import Settings

#: The replication "auto" aims for: any one broker can be lost (with min.insync.replicas 2)
#: while writes go on.
AUTO_REPLICATION = 3
_ALTER = "kafka-configs.sh --bootstrap-server ... --alter --entity-type topics --entity-name"
_REASSIGN = "raise it with kafka-reassign-partitions.sh (docs/operations.md, production checklist)"


def wanted_replication(settings: Settings, brokers: int) -> int:
    """DEDUPE_REPLICATION_FACTOR, or for ``auto`` 3 on three or more brokers, else the broker
    count (1 on a single node)."""
    explicit = parse_count(settings.replication_factor)
    return explicit if explicit is not None else max(1, min(AUTO_REPLICATION, brokers))


def wanted_min_insync(settings: Settings, replication: int) -> int:
    """DEDUPE_MIN_INSYNC_REPLICAS, or for ``auto`` 2 when ``replication`` >= 3, else 1."""
    explicit = parse_count(settings.min_insync_replicas)
    return explicit if explicit is not None else (2 if replication >= 3 else 1)


@dataclass(frozen=True)
class TopicFacts:
    """One topic as the brokers report it (metadata and describe_configs)."""

    name: str
    role: str
    replication: int  # fewest replicas of any partition
    in_sync: int  # fewest in-sync replicas of any partition
    under_replicated: int  # partitions with fewer in-sync replicas than replicas
    min_insync: int
    unclean_election: bool
    cleanup_policy: str
    retention_ms: int


@dataclass(frozen=True)
class Problem:
    """One unsafe value: where, what was found, what is wanted, why, and the fix."""

    topic: str
    role: str
    key: str
    found: str
    wanted: str
    why: str
    fix: str
    refuse: bool

    def line(self) -> str:
        kind = "REFUSED" if self.refuse else "warning"
        return (
            f"[{kind}] {self.role} topic {self.topic!r}: {self.key} is {self.found}, wanted "
            f"{self.wanted} ({self.why}); fix: {self.fix}"
        )


def needed_retention_ms(settings: Settings) -> int:
    """How long a changelog must keep a record: an id for the window plus the lateness, a
    producer's sequence until the producer is forgotten."""
    return int(1000 * max(settings.window + settings.allowed_lateness, settings.producer_idle))


def _topic_problems(t: TopicFacts, brokers: int, settings: Settings) -> list[Problem]:
    def problem(key: str, found: object, wanted: object, why: str, fix: str, refuse: bool) -> None:
        out.append(Problem(t.name, t.role, key, str(found), str(wanted), why, fix, refuse))

    out: list[Problem] = []
    explicit = parse_count(settings.replication_factor)
    wanted = wanted_replication(settings, brokers)
    if t.role == "changelog" and "compact" not in t.cleanup_policy:
        problem(
            "cleanup.policy",
            repr(t.cleanup_policy),
            "'compact'",
            "a changelog that deletes old segments loses seen ids; a restore then lets "
            "repeats through, and exactly-once cannot hold",
            f"{_ALTER} {t.name} --add-config cleanup.policy=compact",
            True,
        )
    elif t.role == "changelog" and "delete" in t.cleanup_policy:
        needed = needed_retention_ms(settings)
        if 0 <= t.retention_ms < needed:
            problem(
                "retention.ms",
                t.retention_ms,
                f">= {needed}",
                "with compact,delete the ids still inside DEDUPE_WINDOW + "
                "DEDUPE_ALLOWED_LATENESS (or producers not yet idle) are deleted",
                f"{_ALTER} {t.name} --add-config cleanup.policy=compact",
                True,
            )
    if t.unclean_election and t.replication >= 2:
        problem(
            "unclean.leader.election.enable",
            "true",
            "false",
            "a replica that missed writes may become leader and truncate a committed transaction",
            f"{_ALTER} {t.name} --add-config unclean.leader.election.enable=false",
            True,
        )
    if t.min_insync > t.replication:
        problem(
            "min.insync.replicas",
            t.min_insync,
            f"<= its replication factor {t.replication}",
            "no acks=all write to it can ever succeed",
            f"{_ALTER} {t.name} --add-config min.insync.replicas={t.replication}",
            True,
        )
    if t.replication == 1 and brokers >= 2:
        problem(
            "replication factor",
            1,
            f"{wanted} ({brokers} brokers)",
            "one broker's disk holds the only copy",
            f"{_REASSIGN}, or set DEDUPE_REPLICATION_FACTOR=1 to run unreplicated on purpose"
            if explicit != 1
            else "unset DEDUPE_REPLICATION_FACTOR (auto) and raise it with "
            "kafka-reassign-partitions.sh",
            explicit != 1,
        )
    elif 1 < t.replication < wanted:
        problem(
            "replication factor",
            t.replication,
            wanted,
            f"it survives the loss of {t.replication - 1} broker(s), not {wanted - 1}",
            _REASSIGN,
            False,
        )
    wanted_isr = min(wanted_min_insync(settings, t.replication), t.replication)
    if (
        t.replication >= 2
        and t.min_insync <= t.replication
        and (t.min_insync == 1 or t.min_insync < wanted_isr)
    ):
        problem(
            "min.insync.replicas",
            t.min_insync,
            max(wanted_isr, 2),
            f"acks=all is acknowledged when {t.min_insync} replica(s) have a write, and "
            "losing those loses it",
            f"{_ALTER} {t.name} --add-config min.insync.replicas={max(wanted_isr, 2)}",
            False,
        )
    if t.under_replicated:
        problem(
            "in-sync replicas",
            f"{t.in_sync} of {t.replication} ({t.under_replicated} partition(s) under-replicated)",
            t.replication,
            "a broker is down or lagging; writes stop when fewer than min.insync.replicas remain",
            "bring the missing brokers back (kafka-topics.sh --describe "
            "--under-replicated-partitions)",
            False,
        )
    return out


def unsafe(facts: Sequence[TopicFacts], brokers: int, settings: Settings) -> list[Problem]:
    """Every unsafe value of every topic, refusals and warnings, in topic order."""
    return [p for t in facts for p in _topic_problems(t, brokers, settings)]


def creation_problems(brokers: int, settings: Settings) -> list[str]:
    """Why topics cannot be created as the settings ask on a cluster of ``brokers``."""
    out = []
    replication = wanted_replication(settings, brokers)
    if replication > brokers:
        out.append(
            f"DEDUPE_REPLICATION_FACTOR={settings.replication_factor} needs {replication} "
            f"brokers and the cluster has {brokers}: lower it (or use auto)"
        )
    min_insync = wanted_min_insync(settings, replication)
    if min_insync > replication:
        out.append(
            f"DEDUPE_MIN_INSYNC_REPLICAS={settings.min_insync_replicas} is more than the "
            f"replication factor {replication}: no acks=all write could succeed (use auto)"
        )
    return out


def message(problems: Sequence[Problem]) -> str:
    """One message naming every problem; it starts with "refusing to start" when any refuses."""
    refused = [p for p in problems if p.refuse]
    head = (
        f"refusing to start: {len(refused)} topic setting(s) break exactly-once"
        if refused
        else "topic settings that weaken exactly-once"
    )
    return f"{head} ({len(problems)} in all; docs/operations.md, production checklist):\n  " + (
        "\n  ".join(p.line() for p in problems)
    )
