"""The rule that names the partitions refusing writes for want of in-sync replicas
(app/eos/replicas.py), on metadata answers as ``describe_topics`` gives them."""

from __future__ import annotations

from typing import Any

from aiokafka.structs import TopicPartition

from app.eos.replicas import Shortfall, shortfalls


def topic(name: str, *isrs: list[int]) -> dict[str, Any]:
    return {
        "topic": name,
        "partitions": [
            {"partition": p, "replicas": [1, 2, 3], "isr": isr} for p, isr in enumerate(isrs)
        ],
    }


def test_a_partition_below_its_minimum_is_named_with_its_figures() -> None:
    described = [topic("out", [1, 2, 3], [3]), topic("cl", [3], [3])]
    short = shortfalls(described, {"out": 2, "cl": 2}, [TopicPartition("out", 1)])
    assert short == [Shortfall(TopicPartition("out", 1), 1, 3, 2)]
    assert str(short[0]) == "out-1 has 1 of 3 replicas in sync, min.insync.replicas=2"


def test_only_the_partitions_asked_about_and_only_those_below() -> None:
    described = [topic("out", [1, 2], [3], [1])]
    tps = [TopicPartition("out", 0), TopicPartition("out", 1)]
    assert [s.tp.partition for s in shortfalls(described, {"out": 2}, tps)] == [1]


def test_the_broker_default_of_one_when_the_topic_does_not_say() -> None:
    described = [topic("out", [2], [])]
    tps = [TopicPartition("out", 0), TopicPartition("out", 1)]
    assert [s.tp.partition for s in shortfalls(described, {}, tps)] == [1]
