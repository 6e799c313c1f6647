"""Naming the partitions below ``min.insync.replicas`` (app/eos/replicas.py): the rule on
metadata answers as ``describe_topics`` gives them, and what the watch says and exports."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from app.eos.replicas import ReplicaWatch, Shortfall, shortfalls
from app.settings import Settings
from app.worker.metrics import REGISTRY


def topic(name: str, *isrs: list[int], error: int = 0) -> dict[str, Any]:
    return {
        "topic": name,
        "error_code": error,
        "partitions": [
            {"partition": p, "replicas": [1, 2, 3], "isr": isr} for p, isr in enumerate(isrs)
        ],
    }


def test_a_partition_below_its_minimum_is_named_with_its_figures() -> None:
    described = [topic("out", [1, 2, 3], [3]), topic("__transaction_state", [1], [1, 2])]
    short = shortfalls(described, {"out": 2, "__transaction_state": 2})
    assert short == [Shortfall("__transaction_state", 0, 1, 3, 2), Shortfall("out", 1, 1, 3, 2)]
    assert str(short[1]) == "out-1 has 1 of 3 replicas in sync, min.insync.replicas=2"


def test_the_broker_default_of_one_when_the_topic_does_not_say() -> None:
    assert [s.partition for s in shortfalls([topic("out", [2], [])], {})] == [1]


def test_a_topic_the_brokers_could_not_describe_is_not_judged() -> None:
    assert shortfalls([topic("gone", [], error=3)], {"gone": 2}) == []


def gauge(name: str) -> float | None:
    return REGISTRY.get_sample_value("dedupe_partitions_below_min_insync", {"topic": name})


def test_the_watch_says_it_once_exports_it_and_says_when_it_is_over(
    caplog: pytest.LogCaptureFixture,
) -> None:
    watch = ReplicaWatch(Settings.from_env({}), lambda: ["t-out"])
    short = [Shortfall("t-out", p, 1, 3, 2) for p in range(5)]
    with caplog.at_level(logging.WARNING, logger="app.eos.replicas"):
        watch.report(short)
        watch.report(short)  # the same again: not repeated within a minute
        assert gauge("t-out") == 5
        watch.report([])
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2, lines
    assert "5 partitions have fewer replicas in sync than min.insync.replicas" in lines[0]
    assert "t-out-0 has 1 of 3" in lines[0] and "and 2 more" in lines[0]
    assert "enough replicas in sync again" in lines[1]
    assert gauge("t-out") == 0
