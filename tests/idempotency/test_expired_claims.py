"""A claim still in progress when its record's ``expire_after`` has passed (its holder
crashed or hung, maybe after its effect) is taken over, not forgotten: the next claim sees
``attempts`` 2 and ``taken_over``, and a repeat after it completes is still a repeat. Only
another payload under the id makes it a new event. PostgreSQL and memory (Redis counts no
attempts). The crash is a claim entered and never left; the time that passes is the lease,
waited for with ``wait=`` or a pause longer than it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

import pytest
from idempotent_consumer import Idempotency, MemoryStore, PostgresStore

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=300)


@pytest.fixture(params=["memory", "postgres"])
async def store(request: pytest.FixtureRequest, servers: Servers, table: str) -> AsyncIterator[Any]:
    if request.param == "memory":
        yield MemoryStore(1000)
        return
    s = PostgresStore(servers.dsn, table=table, max_size=4)
    yield s
    await s.close()


async def test_an_expired_claim_in_progress_is_taken_over(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE, expire_after=LEASE)
    crashed = await idem.claim("e1", payload=b"p").__aenter__()  # never completed
    assert crashed.attempts == 1
    async with idem.claim("e1", payload=b"p", wait=LEASE * 10) as claim:
        assert not claim.done
        assert claim.attempts == 2 and claim.taken_over  # not a first claim
        claim.complete("second")
    async with idem.claim("e1", payload=b"p") as claim:  # the record lives on after it
        assert claim.done and claim.result == "second"


async def test_another_payload_after_expiry_is_a_new_event(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE, expire_after=LEASE)
    await idem.claim("e2", payload=b"old").__aenter__()  # never completed
    await asyncio.sleep(LEASE.total_seconds() * 2)  # past the lease and the expiry
    async with idem.claim("e2", payload=b"new") as claim:
        assert not claim.done and claim.attempts == 1
