"""The Kafka glue on the real broker: IdempotentConsumer reads read_committed, commits only
past completed claims, and a crash before the commit redelivers only repeats. The Faust
helper in-process (agent.test_context)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import faust
import psycopg
import pytest
from aiokafka import AIOKafkaProducer, TopicPartition
from idempotent_consumer import MemoryStore, PostgresStore
from idempotent_consumer.faust_agent import idempotent_agent
from idempotent_consumer.kafka import IdempotentConsumer

from scripts.topic_admin import create_topics
from scripts.topic_reader import committed_offsets
from tests.idempotency.conftest import Servers
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.idempotency


async def produce(bootstrap: str, topic: str) -> None:
    """40 committed records (30 ids, 10 of them sent twice) and 5 in an aborted transaction."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    await producer.start()
    try:
        async with producer.transaction():
            for i in list(range(30)) + list(range(10)):
                await producer.send(topic, key=f"evt-{i}".encode(), value=f"v{i}".encode())
        await producer.begin_transaction()
        for i in range(5):
            await producer.send(topic, key=f"aborted-{i}".encode(), value=b"x")
        await producer.abort_transaction()
    finally:
        await producer.stop()


async def run_until(consumer: IdempotentConsumer, records: int) -> None:
    async def watch() -> None:
        for _ in range(1200):  # at most 60 s
            if consumer.stats.processed + consumer.stats.repeats >= records:
                break
            await asyncio.sleep(0.05)
        consumer.stop()

    watcher = asyncio.create_task(watch())
    await asyncio.wait_for(consumer.run(timeout_ms=200), 60)
    watcher.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await watcher


async def test_consumer_crash_before_commit_redelivers_only_repeats(
    broker: Broker, servers: Servers, table: str, figures: list[str]
) -> None:
    topic, group = f"clean-{unique_suffix()}", f"billing-{unique_suffix()}"
    await create_topics(broker.bootstrap, [topic], 2)
    await produce(broker.bootstrap, topic)
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_effects (event_id text NOT NULL, charge text)")
    store = PostgresStore(servers.dsn, table=table)

    async def charge(record: Any, claim: Any) -> str:
        charge_id = f"ch_{record.key.decode()}"
        await claim.connection.execute(  # the effect, in the claim's transaction
            f"INSERT INTO {table}_effects VALUES (%s, %s)", (record.key.decode(), charge_id)
        )
        return charge_id

    def consumer(**kw: Any) -> IdempotentConsumer:
        return IdempotentConsumer(
            topic,
            bootstrap_servers=broker.bootstrap,
            group_id=group,
            store=store,
            handler=charge,
            join_transaction=True,
            **kw,
        )

    # Run 1 crashes before any offset commit: every effect is done, no offset is committed.
    first = consumer()

    async def no_commit(tp: TopicPartition, offset: int) -> None:
        return None

    first._commit = no_commit  # type: ignore[method-assign]
    await run_until(first, 40)
    assert (first.stats.processed, first.stats.repeats) == (30, 10)
    assert not await committed_offsets(broker.bootstrap, group)

    # Run 2 gets all 40 records again: every one a repeat with the first run's result.
    replayed: list[tuple[str, str]] = []
    last: dict[int, int] = {}

    def on_repeat(repeat: Any) -> str:
        record = repeat.record
        replayed.append((record.key.decode(), repeat.result))
        last[record.partition] = max(last.get(record.partition, -1), record.offset)
        return str(repeat.result)

    second = consumer(on_repeat=on_repeat)
    await run_until(second, 40)
    assert second.stats.processed == 0 and second.stats.repeats == 40
    assert all(result == f"ch_{key}" for key, result in replayed)
    committed = await committed_offsets(broker.bootstrap, group)
    # committed just past the last record handled (the aborted ones and the markers after it
    # are skipped by any read_committed reader)
    assert {tp.partition: off for tp, off in committed.items()} == {
        p: off + 1 for p, off in last.items()
    }
    with psycopg.connect(servers.dsn) as conn:
        rows = conn.execute(f"SELECT event_id FROM {table}_effects").fetchall()
    keys = [r[0] for r in rows]
    assert sorted(keys) == sorted(f"evt-{i}" for i in range(30)), "one effect per id"
    assert not any(k.startswith("aborted-") for k in keys), "aborted records are never read"
    await store.close()
    figures.append(
        "kafka glue: 45 records (30 ids, 10 sent twice, 5 aborted); run 1 processed 30, "
        "repeats 10, committed nothing (crash); run 2: 40 repeats with the first results, "
        "offsets committed past the last record; 30 effects, 0 from aborted records"
    )


async def test_faust_agent_helper_runs_each_id_once() -> None:
    # test_context feeds the agent through an in-memory channel: the broker is never reached
    app = faust.App(f"t-{unique_suffix()}", broker="kafka://127.0.0.1:1", store="memory://")
    topic = app.topic("clean", value_serializer="raw", key_serializer="raw")
    calls: list[bytes] = []

    async def charge(value: bytes, claim: Any) -> str:
        calls.append(value)
        return f"ch_{len(calls)}"

    store = MemoryStore(1000)
    agent = app.agent(topic, name="charge")(idempotent_agent(store, charge))
    async with agent.test_context() as ctx:
        for key in (b"e1", b"e2", b"e1", b"e1"):
            await ctx.put(b"v-" + key, key=key)
        results = [ctx.results[i] for i in range(4)]
    assert results == ["ch_1", "ch_2", "ch_1", "ch_1"]
    assert calls == [b"v-e1", b"v-e2"]
    assert store.contains(app.conf.id, "e1")  # the processor is the app id (its group)
