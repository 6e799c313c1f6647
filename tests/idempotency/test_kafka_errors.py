"""IdempotentConsumer's error policy on the real broker, on every store the tier builds
(bounded memory, PostgreSQL, PostgreSQL with the claim joined to the effect's transaction,
Redis).

A record that keeps failing is tried again a few times, then recovered (a dead-letter topic
keeping its key, value and headers, with Spring Kafka's ``kafka_dlt-*`` headers), and its
offset is committed only once the recoverer succeeded; a recoverer that raises (a
dead-letter topic that refuses the record) commits nothing past it and the next run gets it
again; with no recoverer the consumer raises, as in 1.0, after the retries. Two outcomes are
not failures: an id another consumer holds right now (``AlreadyInProgress``) is waited out,
never dead-lettered, and a result the serializer refuses after the effect completes the
claim with no result and commits the offset.

How to run: ``.venv/bin/python -m pytest -q tests/idempotency/test_kafka_errors.py`` (the
broker on 127.0.0.1:19092, PostgreSQL and Redis from ``scripts/servers.sh up``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import MessageSizeTooLargeError
from idempotent_consumer import Idempotency, PostgresStore
from idempotent_consumer import kafka as glue
from idempotent_consumer.kafka import IdempotentConsumer

from scripts.topic_admin import create_topics, delete_topics_containing
from scripts.topic_reader import committed_offsets, read_topic
from tests.idempotency.conftest import Servers, open_store
from tests.support import Broker, topic_state, unique_suffix

pytestmark = pytest.mark.idempotency


class Boom(Exception):
    pass


@dataclass(frozen=True)
class Backend:
    """The store a test's consumer claims on, and whether its claims join a transaction."""

    kind: str
    store: Any
    joined: bool


@pytest.fixture(params=["memory", "postgres", "postgres-joined", "redis"])
async def backend(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Backend]:
    kind, _, joined = request.param.partition("-")
    async with open_store(kind, servers, table, prefix) as store:
        yield Backend(request.param, store, joined == "joined")


@pytest.fixture
async def suffix(broker: Broker) -> AsyncIterator[str]:
    """The test's topics hold this; they are deleted afterwards."""
    mine = unique_suffix()
    yield mine
    await delete_topics_containing(broker.bootstrap, mine)


@pytest.fixture
async def producer(broker: Broker) -> AsyncIterator[AIOKafkaProducer]:
    p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await p.start()
    yield p
    await p.stop()


def consumer_of(
    broker: Broker, backend: Backend, topic: str, group: str, handler: Any, **kw: Any
) -> IdempotentConsumer:
    return IdempotentConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        store=backend.store,
        handler=handler,
        join_transaction=backend.joined,
        **kw,
    )


async def send(producer: AIOKafkaProducer, topic: str, *records: tuple[str, bytes]) -> None:
    """Records in order on partition 0; each carries a header of its own."""
    for key, value in records:
        await producer.send_and_wait(
            topic, value, key=key.encode(), partition=0, headers=[("trace", key.encode())]
        )


async def run_until(consumer: IdempotentConsumer, handled: int) -> None:
    """Run the consumer until ``handled`` records were processed, repeats or recovered (at
    most 60 s); what ``run`` raises propagates."""

    async def watch() -> None:
        for _ in range(1200):
            s = consumer.stats
            if s.processed + s.repeats + s.recovered >= handled:
                break
            await asyncio.sleep(0.05)
        consumer.stop()

    watcher = asyncio.create_task(watch())
    try:
        await asyncio.wait_for(consumer.run(timeout_ms=200), 60)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await watcher


def handler_of(calls: Counter[str], fails: dict[str, int]) -> Any:
    """A handler counting its calls per key; ``fails[key]`` first calls raise Boom."""

    async def handle(record: Any, claim: Any) -> str:
        key = record.key.decode()
        calls[key] += 1
        if calls[key] <= fails.get(key, 0):
            raise Boom(f"cannot handle {key}")
        return f"done {key}"

    return handle


def collect(into: list[str]) -> Any:
    """A recoverer that keeps the keys it is handed (and so skips their records)."""

    def recoverer(record: Any, error: Exception) -> None:
        into.append(record.key.decode())

    return recoverer


def release_when(release: asyncio.Event, ready: Any) -> asyncio.Task[None]:
    """Set ``release`` once ``ready()`` is true (checked every 20 ms), at the latest after
    30 s: the rival lets go of its claim only after the consumer waited for it."""

    async def watch() -> None:
        for _ in range(1500):
            if ready():
                break
            await asyncio.sleep(0.02)
        release.set()

    return asyncio.create_task(watch())


async def committed(broker: Broker, group: str) -> dict[int, int]:
    return {
        tp.partition: off for tp, off in (await committed_offsets(broker.bootstrap, group)).items()
    }


async def test_a_record_that_keeps_failing_goes_to_the_dead_letter_topic(
    broker: Broker, producer: AIOKafkaProducer, suffix: str, backend: Backend
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    dlt = f"{topic}.DLT"
    await create_topics(broker.bootstrap, [topic, dlt], 1)
    # offsets 0..3: a good one, one that always fails, a good one, the first id reused
    await send(producer, topic, ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"), ("a", b"other"))
    calls: Counter[str] = Counter()
    publisher = glue.DeadLetterPublisher(producer, group_id=group)
    consumer = consumer_of(
        broker,
        backend,
        topic,
        group,
        handler_of(calls, {"bad": 99}),
        errors=glue.ErrorPolicy(retries=2, backoff=timedelta(milliseconds=10), recoverer=publisher),
    )
    await run_until(consumer, 4)
    stats = consumer.stats
    assert (stats.processed, stats.recovered, stats.retries) == (2, 2, 2)
    assert calls == {"a": 1, "bad": 3, "b": 1}  # the reused id is not retried: no handler call
    assert await committed(broker, group) == {0: 4}  # past the recovered records too
    letters = await read_topic(broker.bootstrap, dlt, timeout=30)
    assert [(r.key, r.value) for r in letters] == [(b"bad", b"vbad"), (b"a", b"other")]
    for letter, offset, error in zip(
        letters, (1, 3), ("Boom", "idempotent_consumer._base.PayloadMismatch"), strict=True
    ):
        headers = dict(letter.headers)
        assert headers["trace"] == letter.key  # the record's own headers are kept
        assert headers["kafka_dlt-original-topic"] == topic.encode()
        assert int.from_bytes(headers["kafka_dlt-original-partition"], "big") == 0
        assert int.from_bytes(headers["kafka_dlt-original-offset"], "big") == offset
        assert headers["kafka_dlt-original-consumer-group"] == group.encode()
        assert headers["kafka_dlt-exception-fqcn"].decode().endswith(error)
        assert headers["kafka_dlt-exception-message"]
        assert b"Traceback" in headers["kafka_dlt-exception-stacktrace"]


async def test_a_failed_recoverer_commits_nothing_past_the_record_and_loses_nothing(
    broker: Broker, producer: AIOKafkaProducer, suffix: str, backend: Backend
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"))
    calls: Counter[str] = Counter()
    recovered: list[str] = []

    def recoverer(record: Any, error: Exception) -> None:
        recovered.append(record.key.decode())
        raise RuntimeError("the dead-letter topic is down")

    handler = handler_of(calls, {"bad": 99})
    first = consumer_of(
        broker,
        backend,
        topic,
        group,
        handler,
        errors=glue.ErrorPolicy(retries=0, recoverer=recoverer),
    )
    with pytest.raises(RuntimeError, match="dead-letter topic is down"):
        await run_until(first, 3)
    assert recovered == ["bad"] and calls == {"a": 1, "bad": 1}
    assert await committed(broker, group) == {0: 1}  # only past the record before it

    # The next run (the recoverer back) gets the record again: its claim was released, so
    # the handler runs afresh before it is recovered; the record before it is not redelivered.
    kept: list[str] = []
    second = consumer_of(
        broker,
        backend,
        topic,
        group,
        handler,
        errors=glue.ErrorPolicy(retries=0, recoverer=collect(kept)),
    )
    await run_until(second, 2)
    assert kept == ["bad"] and calls == {"a": 1, "bad": 2, "b": 1}
    assert await committed(broker, group) == {0: 3}


async def set_topic_config(broker: Broker, topic: str, name: str, value: str) -> None:
    """Alter one config of ``topic`` and wait until the broker reports it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs={name: value})]
        )
    finally:
        await admin.close()
    for _ in range(100):
        if (await topic_state(broker.bootstrap, topic)).configs[name][0] == value:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"{topic}: {name} still not {value}")


async def test_a_dead_letter_the_broker_refuses_is_not_lost(
    broker: Broker, producer: AIOKafkaProducer, suffix: str, backend: Backend
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    dlt = f"{topic}.DLT"
    await create_topics(broker.bootstrap, [topic], 1)
    # The dead-letter topic takes smaller records than the topic: the broker refuses the
    # dead letter of a large record (MESSAGE_TOO_LARGE), as it would a misconfigured one.
    await create_topics(broker.bootstrap, [dlt], 1, config={"max.message.bytes": "1000"})
    big = b"x" * 4000
    await send(producer, topic, ("a", b"va"), ("bad", big), ("b", b"vb"))
    calls: Counter[str] = Counter()
    handler = handler_of(calls, {"bad": 99})

    def consumer() -> IdempotentConsumer:
        publisher = glue.DeadLetterPublisher(producer, group_id=group)
        policy = glue.ErrorPolicy(retries=0, recoverer=publisher)
        return consumer_of(broker, backend, topic, group, handler, errors=policy)

    with pytest.raises(MessageSizeTooLargeError):
        await run_until(consumer(), 3)
    assert await committed(broker, group) == {0: 1}  # not past the record never dead-lettered
    assert await read_topic(broker.bootstrap, dlt, timeout=30) == []

    await set_topic_config(broker, dlt, "max.message.bytes", "1048588")
    again = consumer()
    await run_until(again, 2)
    assert (again.stats.recovered, again.stats.processed) == (1, 1)
    assert calls == {"a": 1, "bad": 2, "b": 1}
    assert await committed(broker, group) == {0: 3}
    letters = await read_topic(broker.bootstrap, dlt, timeout=30)
    assert [(r.key, r.value) for r in letters] == [(b"bad", big)]


async def test_by_default_a_passing_failure_is_retried_and_a_lasting_one_raises(
    broker: Broker, producer: AIOKafkaProducer, suffix: str, backend: Backend
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("flaky", b"v1"), ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"))
    calls: Counter[str] = Counter()
    consumer = consumer_of(
        broker, backend, topic, group, handler_of(calls, {"flaky": 1, "bad": 99})
    )
    with pytest.raises(Boom, match="cannot handle bad"):
        await run_until(consumer, 4)
    assert calls == {"flaky": 2, "a": 1, "bad": 3}  # two more tries by default, then raise
    assert consumer.stats.processed == 2
    assert await committed(broker, group) == {0: 2}  # past flaky and a; bad is redelivered


# -- an id another consumer holds: waited out, not a failure ------------------------------


async def test_an_id_held_by_another_transaction_is_waited_for_not_dead_lettered(
    broker: Broker, producer: AIOKafkaProducer, suffix: str, servers: Servers, table: str
) -> None:
    # A joined claim waits a lease for the other transaction's claim of the id, then gets
    # AlreadyInProgress. The other consumer completes the event later: dead-lettering it
    # (retries=0 and a recoverer) would send an event that is done to the dead letters.
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    rival = Idempotency(store, group)
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with (
            store.connection() as conn,
            conn.transaction(),
            rival.claim("held", payload=b"vheld", connection=conn) as claim,
        ):
            holding.set()
            await release.wait()
            claim.complete("charged by the rival")

    holder = asyncio.create_task(hold())
    await holding.wait()
    await send(producer, topic, ("held", b"vheld"), ("b", b"vb"))
    calls: Counter[str] = Counter()
    kept: list[str] = []
    answers: list[Any] = []
    consumer = IdempotentConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        store=store,
        handler=handler_of(calls, {}),
        join_transaction=True,
        lease=timedelta(seconds=1),
        on_repeat=lambda repeat: answers.append(repeat.result),
        errors=glue.ErrorPolicy(
            retries=0, backoff=timedelta(milliseconds=50), recoverer=collect(kept)
        ),
    )
    # the rival completes once the consumer found the id held twice (two leases waited)
    watcher = release_when(release, lambda: consumer.stats.in_progress >= 2)
    try:
        await run_until(consumer, 2)
    finally:
        release.set()
        await holder
        await watcher
        await store.close()
    assert kept == [], "an id another consumer holds is not a failure"
    assert answers == ["charged by the rival"] and calls == {"b": 1}
    assert consumer.stats.in_progress >= 2 and consumer.stats.retries == 0
    assert await committed(broker, group) == {0: 2}


async def test_a_long_hold_is_waited_out_across_polls(
    broker: Broker,
    producer: AIOKafkaProducer,
    suffix: str,
    backend: Backend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The handler claims the id with another processor (a stock reservation), which a
    # rival holds for a while: AlreadyInProgress from the handler. Past in_progress_wait the
    # consumer goes back to polling and reads the record again, without counting it.
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    stock = Idempotency(backend.store, f"stock-{suffix}")
    holding, release = asyncio.Event(), asyncio.Event()

    async def hold() -> None:
        async with stock.claim("held") as claim:
            holding.set()
            await release.wait()
            claim.complete("reserved by the rival")

    holder = asyncio.create_task(hold())
    await holding.wait()
    await send(producer, topic, ("a", b"va"), ("held", b"vheld"), ("b", b"vb"))
    calls: Counter[str] = Counter()

    async def reserve(record: Any, claim: Any) -> Any:
        key = record.key.decode()
        calls[key] += 1
        async with stock.claim(key) as reservation:  # wait=False: AlreadyInProgress at once
            if reservation.done:
                return reservation.result
            reservation.complete(f"reserved {key}")
            return f"reserved {key}"

    kept: list[str] = []
    consumer = consumer_of(
        broker,
        backend,
        topic,
        group,
        reserve,
        errors=glue.ErrorPolicy(
            retries=0,
            backoff=timedelta(milliseconds=20),
            max_backoff=timedelta(milliseconds=100),
            in_progress_wait=timedelta(milliseconds=300),
            recoverer=collect(kept),
        ),
    )
    caplog.set_level(logging.WARNING, logger="idempotent_consumer.kafka")
    # the rival completes once the consumer handed the record back twice: the second time
    # on a read of the record after the first
    watcher = release_when(release, lambda: caplog.text.count("polling again") >= 2)
    try:
        await run_until(consumer, 3)
    finally:
        release.set()
        await holder
        await watcher
    assert kept == [], "an id another consumer holds is not a failure"
    assert calls["a"] == 1 and calls["b"] == 1 and calls["held"] >= 3
    assert consumer.stats.processed == 3 and consumer.stats.retries == 0
    assert caplog.text.count("polling again") >= 2  # handed back to the poll loop
    assert await committed(broker, group) == {0: 3}


# -- a result the serializer refuses: the effect ran, the offset commits ------------------


async def test_a_refused_result_completes_the_claim_and_commits(
    broker: Broker,
    producer: AIOKafkaProducer,
    suffix: str,
    backend: Backend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("a", b"va"), ("b", b"vb"))
    charges: Counter[str] = Counter()

    async def charge(record: Any, claim: Any) -> Any:
        key = record.key.decode()
        charges[key] += 1  # the effect
        return Decimal("9.99") if key == "a" else f"ch_{key}"  # JSON cannot store a Decimal

    kept: list[str] = []
    policy = glue.ErrorPolicy(retries=0, recoverer=collect(kept))
    caplog.set_level(logging.WARNING, logger="idempotent_consumer.kafka")
    consumer = consumer_of(
        broker, backend, topic, group, charge, processor="billing", errors=policy
    )
    await run_until(consumer, 2)
    assert kept == [], "the effect ran: its record is not dead-lettered"
    assert charges == {"a": 1, "b": 1}
    assert (consumer.stats.processed, consumer.stats.unstored) == (2, 1)
    assert await committed(broker, group) == {0: 2}
    assert "Decimal" in caplog.text  # the warning names what the serializer refused

    # Read again (another group, the same processor): a repeat with no result, not a charge.
    answers: list[tuple[str, Any]] = []
    replay = consumer_of(
        broker,
        backend,
        topic,
        f"replay-{suffix}",
        charge,
        processor="billing",
        errors=policy,
        on_repeat=lambda r: answers.append((r.record.key.decode(), r.result)),
    )
    await run_until(replay, 2)
    assert answers == [("a", None), ("b", "ch_b")] and charges == {"a": 1, "b": 1}


async def test_a_refused_result_the_handler_let_out(
    broker: Broker,
    producer: AIOKafkaProducer,
    suffix: str,
    backend: Backend,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The handler completes the claim itself and lets complete()'s NotSerializable out.
    # Not joined, the claim completed as the error left it (the effect is done): a warning
    # and the offset commits. Joined, the error rolled the claim back with the transaction:
    # a failure, handed to the recoverer.
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("a", b"va"), ("b", b"vb"))
    calls: Counter[str] = Counter()

    async def charge(record: Any, claim: Any) -> Any:
        key = record.key.decode()
        calls[key] += 1
        claim.complete({"amount": Decimal("9.99")} if key == "a" else f"ch_{key}")
        return "not stored: the handler completed the claim"

    kept: list[str] = []
    caplog.set_level(logging.WARNING, logger="idempotent_consumer.kafka")
    consumer = consumer_of(
        broker,
        backend,
        topic,
        group,
        charge,
        errors=glue.ErrorPolicy(retries=0, recoverer=collect(kept)),
    )
    await run_until(consumer, 2)
    assert calls == {"a": 1, "b": 1}
    assert await committed(broker, group) == {0: 2}
    if backend.joined:
        assert kept == ["a"] and consumer.stats.unstored == 0
    else:
        assert kept == [] and consumer.stats.unstored == 1
        assert "Decimal" in caplog.text
