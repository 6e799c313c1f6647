"""The consumer thread's cap on records parsed per fetch call (app/eos/consumer.py): small while
records are held back (rebalance, recovery, paused flow), larger in steady processing, and never
absent, so a call made before a rebalance cannot parse a whole response after it."""

from __future__ import annotations

import asyncio
import types
from typing import Any

import pytest
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread

from app.eos import consumer as eos_consumer
from app.eos.consumer import HELD_BACK_MAX_RECORDS, STEADY_MAX_RECORDS, ConsumerThread


def app_state(*, rebalancing: bool = False, in_recovery: bool = False, flow: bool = True) -> Any:
    completed = asyncio.Event()
    completed.set()
    return types.SimpleNamespace(
        rebalancing=rebalancing,
        in_recovery=in_recovery,
        tables=types.SimpleNamespace(recovery=types.SimpleNamespace(completed=completed)),
        consumer=types.SimpleNamespace(flow_active=flow),
    )


@pytest.mark.parametrize(
    ("state", "cap"),
    [
        ({}, STEADY_MAX_RECORDS),
        ({"rebalancing": True}, HELD_BACK_MAX_RECORDS),
        ({"in_recovery": True}, HELD_BACK_MAX_RECORDS),
        ({"flow": False}, HELD_BACK_MAX_RECORDS),
    ],
)
def test_every_fetch_call_has_a_cap(
    monkeypatch: pytest.MonkeyPatch, state: dict[str, bool], cap: int
) -> None:
    asked: list[int | None] = []

    async def fetch(
        self: Any, consumer: Any, tps: Any, timeout: Any = None, max_records: Any = None
    ) -> Any:
        asked.append(max_records)
        return {}

    monkeypatch.setattr(AIOKafkaConsumerThread, "_fetch_records", fetch)
    thread = object.__new__(ConsumerThread)
    monkeypatch.setattr(ConsumerThread, "app", app_state(**state), raising=False)
    asyncio.run(thread._fetch_records(object(), set(), timeout=1.0))
    asyncio.run(thread._fetch_records(object(), set(), timeout=1.0, max_records=7))
    assert asked == [cap, 7]  # a cap the caller set stays
    assert eos_consumer.HELD_BACK_MAX_RECORDS < eos_consumer.STEADY_MAX_RECORDS
