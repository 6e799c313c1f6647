"""The rule of ``app/admin/topic_safety.py``: which topic values refuse the start, which warn,
and what the one message says. The real-broker tests are ``tests/integration/test_topic_safety.py``
(single node) and ``tests/cluster/test_topic_defaults.py`` (three brokers)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from app.admin.topic_safety import (
    Problem,
    TopicFacts,
    creation_problems,
    message,
    unsafe,
    wanted_min_insync,
    wanted_replication,
)
from app.settings import Settings

AUTO = Settings()
WEEK_MS = 7 * 86_400_000

#: A topic as a three-broker cluster with the worker's defaults reports it.
SAFE = TopicFacts(
    name="out",
    role="output",
    replication=3,
    in_sync=3,
    under_replicated=0,
    min_insync=2,
    unclean_election=False,
    cleanup_policy="delete",
    retention_ms=WEEK_MS,
)
SAFE_CHANGELOG = replace(SAFE, name="cl", role="changelog", cleanup_policy="compact")
SINGLE = replace(SAFE, replication=1, in_sync=1, min_insync=1)


def facts(base: TopicFacts = SAFE, **changes: Any) -> TopicFacts:
    return replace(base, **changes)


#: (topic facts, brokers, settings, [(key, found, wanted, refused, text in the fix)])
CASES = [
    pytest.param(SAFE, 3, AUTO, [], id="cluster-defaults"),
    pytest.param(SAFE_CHANGELOG, 3, AUTO, [], id="cluster-changelog"),
    pytest.param(SINGLE, 1, AUTO, [], id="single-node"),
    pytest.param(facts(SINGLE, role="changelog", cleanup_policy="compact"), 1, AUTO, [], id="1-cl"),
    pytest.param(
        facts(SAFE_CHANGELOG, cleanup_policy="delete"),
        3,
        AUTO,
        [("cleanup.policy", "'delete'", "'compact'", True, "--add-config cleanup.policy=compact")],
        id="changelog-delete",
    ),
    pytest.param(
        facts(SINGLE, role="changelog", cleanup_policy="delete"),
        1,
        AUTO,
        [("cleanup.policy", "'delete'", "'compact'", True, "cleanup.policy=compact")],
        id="changelog-delete-single-node",
    ),
    pytest.param(facts(cleanup_policy="delete"), 3, AUTO, [], id="output-may-delete"),
    pytest.param(
        facts(SAFE_CHANGELOG, cleanup_policy="compact,delete", retention_ms=WEEK_MS),
        3,
        AUTO,
        [("retention.ms", str(WEEK_MS), ">= 2422800000", True, "cleanup.policy=compact")],
        id="changelog-compact-delete-short",
    ),
    pytest.param(
        facts(SAFE_CHANGELOG, cleanup_policy="compact,delete", retention_ms=-1),
        3,
        AUTO,
        [],
        id="changelog-compact-delete-forever",
    ),
    pytest.param(
        facts(SAFE_CHANGELOG, cleanup_policy="compact,delete", retention_ms=WEEK_MS),
        3,
        Settings(window=86400.0, allowed_lateness=3600.0),
        [],
        id="changelog-compact-delete-past-window",
    ),
    pytest.param(
        facts(unclean_election=True),
        3,
        AUTO,
        [("unclean.leader.election.enable", "true", "false", True, "election.enable=false")],
        id="unclean-replicated",
    ),
    pytest.param(facts(SINGLE, unclean_election=True), 1, AUTO, [], id="unclean-unreplicated"),
    pytest.param(
        facts(min_insync=4),
        3,
        AUTO,
        [("min.insync.replicas", "4", "<= its replication factor 3", True, "replicas=3")],
        id="min-isr-above-replication",
    ),
    pytest.param(
        facts(SINGLE),
        3,
        AUTO,
        [("replication factor", "1", "3 (3 brokers)", True, "DEDUPE_REPLICATION_FACTOR=1")],
        id="unreplicated-on-cluster",
    ),
    pytest.param(
        facts(SINGLE),
        2,
        AUTO,
        [("replication factor", "1", "2 (2 brokers)", True, "kafka-reassign-partitions.sh")],
        id="unreplicated-on-two",
    ),
    pytest.param(
        facts(SINGLE),
        3,
        Settings(replication_factor="3"),
        [("replication factor", "1", "3 (3 brokers)", True, "DEDUPE_REPLICATION_FACTOR=1")],
        id="unreplicated-explicit-3",
    ),
    pytest.param(
        facts(SINGLE),
        3,
        Settings(replication_factor="1"),
        [("replication factor", "1", "1 (3 brokers)", False, "unset DEDUPE_REPLICATION_FACTOR")],
        id="unreplicated-explicitly",
    ),
    pytest.param(
        facts(replication=2, in_sync=2),
        3,
        AUTO,
        [("replication factor", "2", "3", False, "kafka-reassign-partitions.sh")],
        id="replication-below-auto",
    ),
    pytest.param(facts(replication=2, in_sync=2), 3, Settings(replication_factor="2"), [], id="2"),
    pytest.param(
        facts(min_insync=1),
        3,
        AUTO,
        [("min.insync.replicas", "1", "2", False, "--add-config min.insync.replicas=2")],
        id="one-ack-of-three",
    ),
    pytest.param(
        facts(replication=2, in_sync=2, min_insync=1),
        2,
        AUTO,
        [("min.insync.replicas", "1", "2", False, "min.insync.replicas=2")],
        id="one-ack-of-two",
    ),
    pytest.param(
        facts(replication=5, in_sync=5, min_insync=2),
        5,
        Settings(replication_factor="5", min_insync_replicas="3"),
        [("min.insync.replicas", "2", "3", False, "min.insync.replicas=3")],
        id="min-isr-below-explicit",
    ),
    pytest.param(
        facts(in_sync=1, under_replicated=2),
        3,
        AUTO,
        [
            (
                "in-sync replicas",
                "1 of 3 (2 partition(s) under-replicated)",
                "3",
                False,
                "--under-replicated-partitions",
            )
        ],
        id="under-replicated",
    ),
    pytest.param(
        facts(SAFE_CHANGELOG, cleanup_policy="delete", unclean_election=True, min_insync=1),
        3,
        AUTO,
        [
            ("cleanup.policy", "'delete'", "'compact'", True, "cleanup.policy=compact"),
            ("unclean.leader.election.enable", "true", "false", True, "election.enable=false"),
            ("min.insync.replicas", "1", "2", False, "min.insync.replicas=2"),
        ],
        id="three-at-once",
    ),
]


@pytest.mark.parametrize(("topic", "brokers", "settings", "expected"), CASES)
def test_unsafe(
    topic: TopicFacts,
    brokers: int,
    settings: Settings,
    expected: list[tuple[str, str, str, bool, str]],
) -> None:
    problems = unsafe([topic], brokers, settings)
    got = [(p.key, p.found, p.wanted, p.refuse) for p in problems]
    assert got == [e[:4] for e in expected]
    for p, (*_, fix) in zip(problems, expected, strict=True):
        assert (p.topic, p.role) == (topic.name, topic.role)
        assert fix in p.fix, p.fix
        if p.fix.startswith("kafka-configs.sh"):  # the command names the topic it alters
            assert f"--entity-name {topic.name} " in p.fix


def test_one_message_names_every_problem_of_every_topic() -> None:
    topics = [
        facts(SAFE_CHANGELOG, name="seen", cleanup_policy="delete"),
        facts(name="clean", min_insync=1),
        facts(name="dlq", role="dead-letter", unclean_election=True),
        facts(name="fine"),
    ]
    problems = unsafe(topics, 3, AUTO)
    text = message(problems)
    lines = text.splitlines()
    assert lines[0].startswith("refusing to start: 2 topic setting(s) break exactly-once (3 in all")
    assert lines[1:] == [
        "  [REFUSED] changelog topic 'seen': cleanup.policy is 'delete', wanted 'compact' ("
        + problems[0].why
        + "); fix: kafka-configs.sh --bootstrap-server ... --alter --entity-type topics "
        "--entity-name seen --add-config cleanup.policy=compact",
        "  [warning] output topic 'clean': min.insync.replicas is 1, wanted 2 ("
        + problems[1].why
        + "); fix: kafka-configs.sh --bootstrap-server ... --alter --entity-type topics "
        "--entity-name clean --add-config min.insync.replicas=2",
        "  [REFUSED] dead-letter topic 'dlq': unclean.leader.election.enable is true, wanted "
        "false ("
        + problems[2].why
        + "); fix: kafka-configs.sh --bootstrap-server ... --alter --entity-type topics "
        "--entity-name dlq --add-config unclean.leader.election.enable=false",
    ]
    assert "fine" not in text


def test_warnings_alone_do_not_refuse() -> None:
    problems = unsafe([facts(min_insync=1)], 3, AUTO)
    assert [p.refuse for p in problems] == [False]
    assert not message(problems).startswith("refusing")
    assert message(problems).startswith("topic settings that weaken exactly-once (1 in all")


def test_problem_line() -> None:
    p = Problem("t", "input", "k", "a", "b", "why", "fix it", refuse=False)
    assert p.line() == "[warning] input topic 't': k is a, wanted b (why); fix: fix it"


@pytest.mark.parametrize(
    ("setting", "brokers", "replication"),
    [
        ("auto", 1, 1),
        ("auto", 2, 2),
        ("auto", 3, 3),
        ("auto", 7, 3),
        ("Auto", 4, 3),
        ("1", 5, 1),
        ("5", 5, 5),
        ("2", 1, 2),  # more than the brokers: creation_problems refuses it
    ],
)
def test_wanted_replication(setting: str, brokers: int, replication: int) -> None:
    assert wanted_replication(Settings(replication_factor=setting), brokers) == replication


@pytest.mark.parametrize(
    ("setting", "replication", "min_insync"),
    [("auto", 1, 1), ("auto", 2, 1), ("auto", 3, 2), ("auto", 5, 2), ("3", 5, 3), ("1", 3, 1)],
)
def test_wanted_min_insync(setting: str, replication: int, min_insync: int) -> None:
    assert wanted_min_insync(Settings(min_insync_replicas=setting), replication) == min_insync


@pytest.mark.parametrize(
    ("settings", "brokers", "expected"),
    [
        (AUTO, 1, []),
        (AUTO, 3, []),
        (Settings(replication_factor="1"), 3, []),
        (
            Settings(replication_factor="3"),
            1,
            ["DEDUPE_REPLICATION_FACTOR=3 needs 3 brokers and the cluster has 1"],
        ),
        (
            Settings(min_insync_replicas="3"),
            2,
            ["DEDUPE_MIN_INSYNC_REPLICAS=3 is more than the replication factor 2"],
        ),
        (Settings(min_insync_replicas="3"), 3, []),
    ],
)
def test_creation_problems(settings: Settings, brokers: int, expected: list[str]) -> None:
    got = creation_problems(brokers, settings)
    assert len(got) == len(expected)
    for line, start in zip(got, expected, strict=True):
        assert line.startswith(start), line
