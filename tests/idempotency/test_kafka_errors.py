"""IdempotentConsumer's error policy on the real broker: a record that keeps failing is tried
again a few times, then recovered (a dead-letter topic keeping its key, value and headers,
with Spring Kafka's ``kafka_dlt-*`` headers), and its offset is committed only once the
recoverer succeeded; with no recoverer the consumer raises, as in 1.0, after the retries."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from idempotent_consumer import MemoryStore
from idempotent_consumer import kafka as glue
from idempotent_consumer.kafka import IdempotentConsumer

from scripts.topic_admin import create_topics, delete_topics_containing
from scripts.topic_reader import committed_offsets, read_topic
from tests.support import Broker, unique_suffix

pytestmark = pytest.mark.idempotency


class Boom(Exception):
    pass


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
            if s.processed + s.repeats + getattr(s, "recovered", 0) >= handled:
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


async def committed(broker: Broker, group: str) -> dict[int, int]:
    return {
        tp.partition: off for tp, off in (await committed_offsets(broker.bootstrap, group)).items()
    }


async def test_a_record_that_keeps_failing_goes_to_the_dead_letter_topic(
    broker: Broker, producer: AIOKafkaProducer, suffix: str
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    dlt = f"{topic}.DLT"
    await create_topics(broker.bootstrap, [topic, dlt], 1)
    # offsets 0..3: a good one, one that always fails, a good one, the first id reused
    await send(producer, topic, ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"), ("a", b"other"))
    calls: Counter[str] = Counter()
    publisher = glue.DeadLetterPublisher(producer, group_id=group)
    consumer = IdempotentConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        store=MemoryStore(1000),
        handler=handler_of(calls, {"bad": 99}),
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


async def test_a_failed_recoverer_commits_nothing_past_the_record(
    broker: Broker, producer: AIOKafkaProducer, suffix: str
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"))
    calls: Counter[str] = Counter()
    recovered: list[str] = []

    def recoverer(record: Any, error: Exception) -> None:
        recovered.append(record.key.decode())
        raise RuntimeError("the dead-letter topic is down")

    consumer = IdempotentConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        store=MemoryStore(1000),
        handler=handler_of(calls, {"bad": 99}),
        errors=glue.ErrorPolicy(retries=0, recoverer=recoverer),
    )
    with pytest.raises(RuntimeError, match="dead-letter topic is down"):
        await run_until(consumer, 3)
    assert recovered == ["bad"] and calls == {"a": 1, "bad": 1}
    assert await committed(broker, group) == {0: 1}  # only past the record before it


async def test_by_default_a_passing_failure_is_retried_and_a_lasting_one_raises(
    broker: Broker, producer: AIOKafkaProducer, suffix: str
) -> None:
    topic, group = f"clean-{suffix}", f"billing-{suffix}"
    await create_topics(broker.bootstrap, [topic], 1)
    await send(producer, topic, ("flaky", b"v1"), ("a", b"va"), ("bad", b"vbad"), ("b", b"vb"))
    calls: Counter[str] = Counter()
    consumer = IdempotentConsumer(
        topic,
        bootstrap_servers=broker.bootstrap,
        group_id=group,
        store=MemoryStore(1000),
        handler=handler_of(calls, {"flaky": 1, "bad": 99}),
    )
    with pytest.raises(Boom, match="cannot handle bad"):
        await run_until(consumer, 4)
    assert calls == {"flaky": 2, "a": 1, "bad": 3}  # two more tries by default, then raise
    assert consumer.stats.processed == 2
    assert await committed(broker, group) == {0: 2}  # past flaky and a; bad is redelivered
