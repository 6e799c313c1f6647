"""One ``on_repeat`` shape everywhere: ``on_repeat(repeat: Repeat)``, whose return value is
the repeat's answer, in the decorators (async and sync) and in ``IdempotentConsumer``; 1.0's
two-argument shapes still work for 1.1, with a ``DeprecationWarning``.

On PostgreSQL and Redis (the consumer's ``process`` is called with a record built here: the
hook's shape does not need a broker).
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from idempotent_consumer import (
    Idempotency,
    Repeat,
    SyncIdempotency,
    idempotent,
    idempotent_function,
)
from idempotent_consumer.kafka import IdempotentConsumer

from tests.idempotency.conftest import Servers, open_store

pytestmark = pytest.mark.idempotency


@pytest.fixture(params=["postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


def record(key: bytes, value: bytes, offset: int = 0) -> ConsumerRecord[bytes, bytes]:
    return ConsumerRecord("orders", 0, offset, 0, 0, key, value, None, len(key), len(value), [])


async def test_decorators_pass_a_repeat_and_answer_what_the_hook_returns(store: Any) -> None:
    idem = Idempotency(store, "billing")
    seen: list[Repeat] = []

    async def on_repeat(repeat: Repeat) -> str:
        seen.append(repeat)
        return f"again {repeat.result}"

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # the current shape: no warning

        @idempotent_function(idem, key="order_id", on_repeat=on_repeat)
        async def charge(order_id: str) -> str:
            return f"ch_{order_id}"

        @idempotent(idem, on_repeat=on_repeat)
        async def handle(rec: Any) -> str:
            return f"handled {rec.key.decode()}"

    assert await charge("o1") == "ch_o1"
    assert await charge("o1") == "again ch_o1"
    first = record(b"e1", b"v")
    assert await handle(first) == "handled e1"
    again = record(b"e1", b"v", offset=7)
    assert await handle(again) == "again handled e1"
    by_fn, by_record = seen
    assert (by_fn.event_id, by_fn.result, by_fn.record) == ("o1", "ch_o1", None)
    assert by_fn.claim.done and by_fn.processor.startswith("billing/")
    assert by_record.record is again and by_record.result == "handled e1"
    assert by_record.attempts in (1, None)  # Redis cannot count


def test_sync_decorator_passes_a_repeat(store: Any) -> None:
    idem = SyncIdempotency(store, "billing")

    @idempotent_function(idem, key="order_id", on_repeat=lambda repeat: ("again", repeat.result))
    def charge(order_id: str) -> str:
        return f"ch_{order_id}"

    assert charge("o2") == "ch_o2"
    assert charge("o2") == ("again", "ch_o2")


async def test_the_consumer_passes_a_repeat_with_the_record(store: Any) -> None:
    seen: list[Repeat] = []

    def on_repeat(repeat: Repeat) -> str:
        seen.append(repeat)
        return f"again {repeat.result}"

    async def charge(rec: Any, claim: Any) -> str:
        return f"ch_{rec.key.decode()}"

    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        consumer = IdempotentConsumer(
            "orders",
            bootstrap_servers="127.0.0.1:1",  # never started: process() needs no broker
            group_id="billing",
            store=store,
            handler=charge,
            on_repeat=on_repeat,
        )
    assert await consumer.process(record(b"e2", b"v")) == "ch_e2"
    redelivered = record(b"e2", b"v", offset=9)
    assert await consumer.process(redelivered) == "again ch_e2"
    (repeat,) = seen
    assert repeat.record is redelivered
    assert (repeat.event_id, repeat.processor, repeat.result) == ("e2", "billing", "ch_e2")


async def test_the_old_shapes_still_work_with_a_deprecation_warning(store: Any) -> None:
    idem = Idempotency(store, "billing")
    calls: list[tuple[Any, Any]] = []

    async def old_decorator_hook(result: Any, claim: Any) -> str:
        calls.append((result, claim.done))
        return f"again {result}"

    with pytest.warns(DeprecationWarning, match=r"on_repeat\(result, claim\)"):

        @idempotent_function(idem, key="order_id", on_repeat=old_decorator_hook)
        async def charge(order_id: str) -> str:
            return f"ch_{order_id}"

    assert await charge("o3") == "ch_o3"
    assert await charge("o3") == "again ch_o3"

    async def old_consumer_hook(rec: Any, result: Any) -> None:
        calls.append((rec.offset, result))

    async def handler(rec: Any, claim: Any) -> str:
        return "first"

    with pytest.warns(DeprecationWarning, match=r"on_repeat\(record, result\)"):
        consumer = IdempotentConsumer(
            "orders",
            bootstrap_servers="127.0.0.1:1",
            group_id="billing",
            store=store,
            handler=handler,
            on_repeat=old_consumer_hook,
        )
    await consumer.process(record(b"e3", b"v"))
    assert await consumer.process(record(b"e3", b"v", offset=5)) == "first"  # as in 1.0
    assert calls == [("ch_o3", True), (5, "first")]
