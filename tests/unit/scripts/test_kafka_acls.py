"""scripts/kafka_acls.py names exactly the resources the worker uses (its transactional ids,
group and topics), and grants nothing on the cluster or beyond them. The same ACLs on a real
secured broker: tests/security."""

from __future__ import annotations

from app.admin.topics import topic_specs
from app.eos.producer import TransactionalProducers
from app.settings import Settings
from scripts.kafka_acls import Acl, all_acls, leader_topic_name, worker_acls
from tables.producers import changelog_topic_name as producers_changelog_name
from tables.seen_ids.table import changelog_topic_name

SETTINGS = Settings.from_env({"DEDUPE_APP_ID": "shop", "DEDUPE_INPUT_TOPIC": "orders"})


def granted(acls: list[Acl], operation: str, resource: str) -> set[str]:
    return {
        n for a in acls if a.resource == resource and operation in a.operations for n in a.names
    }


def test_the_transactional_id_prefix_covers_every_partitions_producer() -> None:
    [prefix] = granted(worker_acls(SETTINGS, "w"), "Write", "transactional-id")
    producers = TransactionalProducers(SETTINGS, lambda: False)
    for partition in range(SETTINGS.partitions):
        assert producers.transactional_id(partition).startswith(prefix)
    assert prefix == "shop-orders-"


def test_the_worker_reads_and_writes_exactly_its_topics() -> None:
    acls = worker_acls(SETTINGS, "w")
    changelog = changelog_topic_name(SETTINGS)
    producers = producers_changelog_name(SETTINGS)
    assert {s.name for s in topic_specs(SETTINGS, changelog, [producers])} == {
        "orders",
        "shop-orders-repartition",
        "shop-seen_ids-changelog",
        producers,
        "events-clean",
        "events-dlq",
    }
    assert granted(acls, "Read", "topic") == {
        "orders",
        "shop-orders-repartition",
        changelog,
        producers,
        leader_topic_name(SETTINGS),
        "events-clean",  # GET /messages/{id} reads the forwarded copy
        "events-dlq",  # the hanging-transaction repair's DescribeProducers (app/eos/hanging.py)
    }
    assert granted(acls, "Write", "topic") == {
        "events-clean",
        "events-dlq",
        "shop-orders-repartition",
        changelog,
        producers,
    }
    assert granted(acls, "Read", "group") == {"shop"}
    # the start-up safety check reads the configs of each topic it checks
    # (app/admin/topic_safety.py)
    assert granted(acls, "DescribeConfigs", "topic") == {
        "orders",
        "shop-orders-repartition",
        changelog,
        producers,
        "events-clean",
        "events-dlq",
    }


def test_without_create_only_fausts_leader_topic_keeps_create() -> None:
    assert granted(worker_acls(SETTINGS, "w", create=False), "Create", "topic") == {
        "shop-__assignor-__leader"
    }


def test_ingest_and_spark_get_one_topic_each_and_nobody_the_cluster() -> None:
    acls = all_acls(SETTINGS)
    ingest = [a for a in acls if a.principal == "dedupe-ingest"]
    spark = [a for a in acls if a.principal == "dedupe-spark"]
    assert (
        granted(ingest, "Write", "topic") == {"orders"}
        and granted(ingest, "Read", "topic") == set()
    )
    assert granted(spark, "Read", "topic") == {"events-clean"}
    assert granted(spark, "Write", "topic") == set()
    assert [a.resource for a in spark] == ["topic"]  # no group: offsets live in its checkpoint
    assert not [a for a in acls if a.resource == "cluster" or "All" in a.operations]


def test_each_rule_becomes_one_binding_per_operation_and_name() -> None:
    acl = Acl("w", ("Read", "DescribeConfigs"), "transactional-id", ("a-", "b-"), prefixed=True)
    assert acl.bindings() == [
        "User:w\tREAD\tTRANSACTIONAL_ID\ta-\tPREFIXED",
        "User:w\tREAD\tTRANSACTIONAL_ID\tb-\tPREFIXED",
        "User:w\tDESCRIBE_CONFIGS\tTRANSACTIONAL_ID\ta-\tPREFIXED",
        "User:w\tDESCRIBE_CONFIGS\tTRANSACTIONAL_ID\tb-\tPREFIXED",
    ]
