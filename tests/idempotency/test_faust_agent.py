"""The Faust helper (``idempotent_agent``) on every store the tier builds, in-process through
``agent.test_context()``, with the dead letters on the real broker: the same ``on_repeat``
and ``ErrorPolicy`` as ``IdempotentConsumer``, and a claim the handler completed itself is
left as it completed it (a stored error result stays an error).

How to run: ``.venv/bin/python -m pytest -q tests/idempotency/test_faust_agent.py`` (the
broker on 127.0.0.1:19092, PostgreSQL and Redis from ``scripts/servers.sh up``).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from decimal import Decimal
from typing import Any

import faust
import pytest
from aiokafka import AIOKafkaProducer
from idempotent_consumer import Idempotency, MemoryStore, Repeat
from idempotent_consumer.faust_agent import idempotent_agent
from idempotent_consumer.kafka import ConsumerStats, DeadLetterPublisher, ErrorPolicy

from scripts.topic_admin import create_topics, delete_topics_containing
from scripts.topic_reader import read_topic
from tests.idempotency.conftest import Servers, open_store
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.idempotency


class Boom(Exception):
    pass


@pytest.fixture(params=["memory", "postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


def app_and_topic(name: str) -> tuple[faust.App, Any]:
    # test_context feeds the agent through an in-memory channel: the app's broker is never
    # reached (the dead-letter producer of a test has its own connection)
    app = faust.App(f"t-{unique_suffix()}", broker="kafka://127.0.0.1:1", store="memory://")
    return app, app.topic(name, value_serializer="raw", key_serializer="raw")


async def test_a_stored_error_result_stays_an_error(store: Any) -> None:
    app, topic = app_and_topic("orders")
    calls: list[bytes] = []

    async def charge(value: bytes, claim: Any) -> None:
        calls.append(value)
        claim.complete_error({"code": "card_declined"})  # a final refusal, kept for repeats

    agent = app.agent(topic, name="charge")(idempotent_agent(store, charge))
    async with agent.test_context() as ctx:
        await ctx.put(b"declined", key=b"e1")
        await ctx.put(b"declined", key=b"e1")
        results = [ctx.results[i] for i in range(2)]
    assert results == [None, {"code": "card_declined"}] and calls == [b"declined"]
    async with Idempotency(store, app.conf.id).claim("e1", payload=b"declined") as claim:
        assert claim.done and claim.failed, "the error result was completed over"
        assert claim.result == {"code": "card_declined"}


async def test_on_repeat_gets_a_repeat_and_its_answer_is_yielded(store: Any) -> None:
    app, topic = app_and_topic("orders")
    calls: Counter[bytes] = Counter()
    repeats: list[Repeat] = []

    async def charge(value: bytes, claim: Any) -> Any:
        calls[value] += 1
        if value == b"declined":
            claim.complete_error({"code": "card_declined"})
            return None
        return f"ch_{value.decode()}"

    async def on_repeat(repeat: Repeat) -> Any:  # awaited, as with IdempotentConsumer
        repeats.append(repeat)
        return {"failed": repeat.failed, "result": repeat.result}

    agent = app.agent(topic, name="charge")(idempotent_agent(store, charge, on_repeat=on_repeat))
    async with agent.test_context() as ctx:
        for key, value in ((b"e1", b"declined"), (b"e2", b"ok"), (b"e1", b"declined")):
            await ctx.put(value, key=key)
        await ctx.put(b"ok", key=b"e2")
        results = [ctx.results[i] for i in range(4)]
    assert calls == {b"declined": 1, b"ok": 1}
    assert results == [
        None,
        "ch_ok",
        {"failed": True, "result": {"code": "card_declined"}},
        {"failed": False, "result": "ch_ok"},
    ]
    first = repeats[0]
    assert first.event_id == "e1" and first.processor == app.conf.id
    # repeat.record is the event's Kafka record, as IdempotentConsumer gives it
    record = first.record
    assert (record.topic, record.key, record.value, record.offset) == (
        "orders",
        b"e1",
        b"declined",
        2,
    )


def test_on_repeat_of_another_shape_is_refused_at_once() -> None:
    def old_shape(record: Any, result: Any) -> Any:
        return result

    async def charge(value: bytes, claim: Any) -> None:
        return None

    hook: Any = old_shape  # the agent never took 1.0's two-argument shape
    with pytest.raises(TypeError, match="one argument"):
        idempotent_agent(MemoryStore(10), charge, on_repeat=hook)


async def test_a_result_completed_by_the_handler_is_kept(store: Any) -> None:
    app, topic = app_and_topic("orders")

    async def charge(value: bytes, claim: Any) -> str:
        claim.complete("ch_stored")
        return "returned"

    agent = app.agent(topic, name="charge")(idempotent_agent(store, charge))
    async with agent.test_context() as ctx:
        await ctx.put(b"v", key=b"e1")
        await ctx.put(b"v", key=b"e1")
        results = [ctx.results[i] for i in range(2)]
    assert results == ["returned", "ch_stored"]  # the repeat reads what the handler stored


async def test_failures_are_retried_then_recovered(store: Any) -> None:
    app, topic = app_and_topic("orders")
    calls: Counter[bytes] = Counter()
    fails = {b"flaky": 1, b"bad": 99}

    async def charge(value: bytes, claim: Any) -> str:
        calls[value] += 1
        if calls[value] <= fails.get(value, 0):
            raise Boom(f"cannot charge {value!r}")
        return f"ch_{value.decode()}"

    recovered: list[tuple[bytes, str]] = []

    def recoverer(record: Any, error: Exception) -> None:
        recovered.append((record.key, type(error).__name__))

    stats = ConsumerStats()
    policy = ErrorPolicy(retries=2, backoff=timedelta(milliseconds=10), recoverer=recoverer)
    agent = app.agent(topic, name="charge")(
        idempotent_agent(store, charge, errors=policy, stats=stats)
    )
    async with agent.test_context() as ctx:
        await ctx.put(b"flaky", key=b"e1")
        await ctx.put(b"bad", key=b"e2")
        await ctx.put(b"ok", key=b"e3")
        await ctx.put(b"other", key=b"e3")  # the id reused with another payload
        await ctx.put(b"bad", key=b"e2")  # the failed one again: its claim was released
        results = [ctx.results[i] for i in range(5)]
    assert results == ["ch_flaky", None, "ch_ok", None, None]
    assert calls == {b"flaky": 2, b"bad": 6, b"ok": 1}
    assert recovered == [(b"e2", "Boom"), (b"e3", "PayloadMismatch"), (b"e2", "Boom")]
    assert (stats.processed, stats.retries, stats.recovered) == (2, 5, 3)


async def test_a_refused_result_completes_with_no_result(
    store: Any, caplog: pytest.LogCaptureFixture
) -> None:
    app, topic = app_and_topic("orders")
    calls: list[bytes] = []

    async def charge(value: bytes, claim: Any) -> Decimal:
        calls.append(value)
        return Decimal("9.99")  # JSON cannot store it: the effect ran all the same

    recovered: list[Any] = []
    policy = ErrorPolicy(retries=0, recoverer=lambda record, error: recovered.append(record))
    caplog.set_level(logging.WARNING, logger="idempotent_consumer.kafka")
    agent = app.agent(topic, name="charge")(idempotent_agent(store, charge, errors=policy))
    async with agent.test_context() as ctx:
        await ctx.put(b"v", key=b"e1")
        await ctx.put(b"v", key=b"e1")
        results = [ctx.results[i] for i in range(2)]
    assert results == [Decimal("9.99"), None] and calls == [b"v"] and recovered == []
    assert "Decimal" in caplog.text


async def test_dead_letters_of_the_agent_on_the_real_broker(broker: Broker, store: Any) -> None:
    suffix = unique_suffix()
    source = f"orders-{suffix}"
    dlt = f"{source}.DLT"
    await create_topics(broker.bootstrap, [dlt], 1)
    producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, acks="all")
    await producer.start()
    try:
        app, topic = app_and_topic(source)

        async def charge(value: bytes, claim: Any) -> str:
            if value == b"bad":
                raise Boom("cannot charge")
            return "ch"

        publisher = DeadLetterPublisher(producer, group_id=app.conf.id)
        agent = app.agent(topic, name="charge")(
            idempotent_agent(store, charge, errors=ErrorPolicy(retries=0, recoverer=publisher))
        )
        sent_at = time.time()
        async with agent.test_context() as ctx:
            await ctx.put(b"bad", key=b"e1", headers=[("trace", b"t1")], timestamp=sent_at)
            await ctx.put(b"ok", key=b"e2")
            results = [ctx.results[i] for i in range(2)]
        assert results == [None, "ch"] and publisher.published == 1
        (letter,) = await read_topic(broker.bootstrap, dlt, timeout=30)
    finally:
        await producer.stop()
        await delete_topics_containing(broker.bootstrap, suffix)
    assert (letter.key, letter.value) == (b"e1", b"bad")
    assert letter.timestamp_ms == round(sent_at * 1000)  # Kafka's milliseconds, not Faust's seconds
    headers = dict(letter.headers)
    assert headers["trace"] == b"t1"
    assert headers["kafka_dlt-original-topic"] == source.encode()
    assert int.from_bytes(headers["kafka_dlt-original-timestamp"], "big") == round(sent_at * 1000)
    assert headers["kafka_dlt-exception-fqcn"].decode().endswith("Boom")
