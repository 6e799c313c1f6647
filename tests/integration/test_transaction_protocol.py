"""The transaction protocol on real brokers (app/eos/txn_protocol.py, txn_v2.py): the finalized
``transaction.version`` read from ApiVersions v3+ on a broker formatted with Kafka's defaults (2)
and one formatted with ``transaction.version=1``; a worker says which protocol runs (start-up
log, ``/stats``) and refuses ``DEDUPE_TRANSACTION_PROTOCOL=v2`` on the version-1 broker; the v2
flow's transactions (epoch bumped at each commit and abort, only committed records and offsets
visible) and its marker-only transaction. Run: ``pytest tests/integration/
test_transaction_protocol.py`` (it formats and stops its own brokers on ports 19400 and 19410)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka.structs import TopicPartition

from app.eos.collector import RecordCollector
from app.eos.hanging import BrokerMarkers, HangingTransactions
from app.eos.producer import (
    TransactionalProducers,
    producer_id_and_epoch,
    send_lingering,
)
from app.eos.task import Task
from app.eos.txn_protocol import cluster_features, detect
from app.eos.txn_v2 import is_v2
from app.settings import Settings
from scripts.topic_admin import create_topics
from scripts.topic_reader import committed_offsets, read_topic, settled_ends
from tests.support import Broker, Names, unique_suffix
from tests.workers import Worker, get

pytestmark = pytest.mark.integration


def settings_for(broker: Broker, protocol: str = "auto") -> Settings:
    return Settings.from_env(
        {"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "DEDUPE_TRANSACTION_PROTOCOL": protocol}
    )


def test_the_finalized_transaction_version_is_read(tv2_broker: Broker, tv1_broker: Broker) -> None:
    on_v2 = asyncio.run(cluster_features(settings_for(tv2_broker)))
    on_v1 = asyncio.run(cluster_features(settings_for(tv1_broker)))
    assert on_v2.levels["transaction.version"] == 2
    assert on_v2.transaction_version == 2
    assert on_v1.levels["transaction.version"] == 1
    assert on_v1.transaction_version == 1
    # Both report a known features epoch and other finalized features (the metadata version).
    assert on_v2.epoch >= 0 and on_v1.epoch >= 0
    assert on_v2.levels["metadata.version"] > 0 and on_v1.levels["metadata.version"] > 0

    chosen = asyncio.run(detect(settings_for(tv2_broker)))
    assert chosen.cluster_transaction_version == 2
    assert chosen.running == "v2"
    assert asyncio.run(detect(settings_for(tv1_broker))).running == "v1"
    assert asyncio.run(detect(settings_for(tv2_broker, "v1"))).running == "v1"


def wait_stats(worker: Worker, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = get(worker, "/stats")
        if status == 200:
            return dict(body)
        time.sleep(0.5)
    raise AssertionError(f"no /stats after {timeout}s:\n{worker.log_text()[-4000:]}")


def test_a_worker_says_which_protocol_runs(
    tv2_broker: Broker, tv1_broker: Broker, names: Names
) -> None:
    """On the v2 broker ``auto`` runs v2 and ``v1`` is honoured; on the v1 broker ``v2`` is
    refused at start-up."""
    auto = Worker(tv2_broker, names, index=0, partitions=2)
    other_group = Names(unique_suffix(), names.data_root)
    forced_v1 = Worker(
        tv2_broker,
        other_group,
        index=1,
        partitions=2,
        extra_env={"DEDUPE_TRANSACTION_PROTOCOL": "v1"},
    )
    refused = Worker(
        tv1_broker, names, index=2, partitions=2, extra_env={"DEDUPE_TRANSACTION_PROTOCOL": "v2"}
    )
    try:
        auto.start()
        auto.wait_ready()
        assert wait_stats(auto)["transactions"] == {
            "protocol": "v2",
            "setting": "auto",
            "cluster_transaction_version": 2,
        }
        assert (
            "transactions run protocol v2 (DEDUPE_TRANSACTION_PROTOCOL=auto: chosen from what "
            "the cluster finalized); the cluster finalized transaction.version=2"
        ) in auto.log_text()

        forced_v1.start()
        forced_v1.wait_ready()
        assert wait_stats(forced_v1)["transactions"] == {
            "protocol": "v1",
            "setting": "v1",
            "cluster_transaction_version": 2,
        }

        refused.start()
        assert refused.proc is not None
        assert refused.proc.wait(timeout=120) != 0
        assert (
            "DEDUPE_TRANSACTION_PROTOCOL=v2, but the cluster finalized transaction.version=1"
            in refused.log_text()
        )
    finally:
        for w in (auto, forced_v1, refused):
            w.kill()


async def transactions(
    broker: Broker, names: Names, protocol: str, plan: list[bool]
) -> list[tuple[int, int]]:
    """Run one transaction per entry of ``plan`` (True: commit, False: abort) on one task
    producer, each with 4 records on 2 output partitions and the input offset ``10 * (i+1)``;
    the producer id and epoch after each."""
    settings = Settings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
            "DEDUPE_APP_ID": names.app_id,
            "DEDUPE_INPUT_TOPIC": names.input_topic,
            "DEDUPE_TRANSACTION_PROTOCOL": protocol,
        }
    )
    await create_topics(broker.bootstrap, [names.input_topic], 1)
    await create_topics(broker.bootstrap, [names.output_topic], 2)
    producers = TransactionalProducers(settings, lambda: False)
    producers.use_protocol(await detect(settings))
    assert producers.protocol.running == protocol
    producer = await producers.start(0)
    states = [producer_id_and_epoch(producer)]
    try:
        assert is_v2(producer) == (protocol == "v2")
        collector = RecordCollector()
        for i, commit in enumerate(plan):
            await producer.begin_transaction()
            for k in range(4):
                tp = TopicPartition(names.output_topic, k % 2)
                await collector.append(producer, tp, f"{i}".encode(), f"{i}-{k}".encode())
            await collector.send_all(producer)
            await send_lingering(producer)
            await collector.delivered()
            offsets = {TopicPartition(names.input_topic, 0): 10 * (i + 1)}
            await producer.send_offsets_to_transaction(offsets, names.app_id)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
            collector.reset()
            states.append(producer_id_and_epoch(producer))
    finally:
        await producers.close(producer)
    return states


@pytest.mark.parametrize(("protocol", "bump"), [("v2", 1), ("v1", 0)])
def test_transactions_of_one_producer(
    protocol: str, bump: int, names: Names, request: pytest.FixtureRequest
) -> None:
    """v2 on the v2 broker: each EndTxn (commit or abort) returns the next epoch of the same
    producer id, which the next transaction uses from sequence 0 (a sequence not reset would
    be refused as out of order); v1 on the v1 broker keeps its epoch. Either way only the
    committed transactions' records and offsets count."""
    broker: Broker = request.getfixturevalue("tv2_broker" if protocol == "v2" else "tv1_broker")
    plan = [True, False, True, False, True]
    states = asyncio.run(transactions(broker, names, protocol, plan))
    pid, epoch = states[0]
    assert pid >= 0 and epoch >= 0
    assert states == [(pid, epoch + bump * i) for i in range(len(plan) + 1)]

    committed = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    assert sorted(r.value for r in committed if r.value) == sorted(
        f"{i}-{k}".encode() for i in (0, 2, 4) for k in range(4)
    )
    everything = asyncio.run(
        read_topic(broker.bootstrap, names.output_topic, isolation_level="read_uncommitted")
    )
    assert len(everything) == 4 * len(plan)  # the aborted records were written, then aborted
    offsets = asyncio.run(committed_offsets(broker.bootstrap, names.app_id))
    assert offsets == {TopicPartition(names.input_topic, 0): 50}


async def record_less_commit(broker: Broker, names: Names) -> dict[str, Any]:
    """A v2 task commits through two partitions without a record (app/eos/hanging.py's repair
    of its own producer id), then commits a record on v2."""
    settings = settings_for(broker, "v2")
    await create_topics(broker.bootstrap, [names.output_topic], 2)
    producers = TransactionalProducers(settings, lambda: False)
    producers.use_protocol(await detect(settings))
    tps = [TopicPartition(names.output_topic, p) for p in (0, 1)]
    task = Task(0, producers.transactional_id(0), await producers.start(0))
    failures: list[BaseException] = []
    repair = HangingTransactions(
        producers, BrokerMarkers(settings), lambda p: tps, lambda t, e: failures.append(e)
    )
    try:
        before = producer_id_and_epoch(task.producer)  # type: ignore[arg-type]
        done = await repair.commit_through({0: task}, [tps[0]])
        assert task.producer is not None
        after = producer_id_and_epoch(task.producer)
        v2_after = is_v2(task.producer)
        await task.producer.begin_transaction()
        await (await task.producer.send(names.output_topic, b"v", partition=0))
        await task.producer.commit_transaction()
    finally:
        if task.producer is not None:
            await producers.close(task.producer)
    ends = await settled_ends(broker.bootstrap, names.output_topic)
    values = [r.value for r in await read_topic(broker.bootstrap, names.output_topic)]
    return {
        "done": done,
        "failures": failures,
        "before": before,
        "after": after,
        "v2_after": v2_after,
        "ends": ends,
        "values": values,
    }


def test_a_v2_task_commits_through_without_a_record_in_a_session_on_the_old_flow(
    tv2_broker: Broker, names: Names
) -> None:
    """Under v2 only a record adds a partition, so app/eos/hanging.py commits its record-less
    transaction in a producer session of its own on the old flow (AddPartitionsToTxn, EndTxn
    v0) between two v2 sessions: a marker lands on each partition (the end offsets move past
    it), and the v2 producer started after it commits records as before."""
    seen = asyncio.run(record_less_commit(tv2_broker, names))
    assert seen["done"] == [0] and seen["failures"] == []
    pid, epoch = seen["before"]
    # Same producer id; the session's InitProducerId and the new v2 producer's each bump it.
    assert seen["after"] == (pid, epoch + 2)
    assert seen["v2_after"]
    assert seen["ends"] == {0: 3, 1: 1}  # marker | record, marker
    assert seen["values"] == [b"v"]
