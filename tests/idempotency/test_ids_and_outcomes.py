"""Ids of every type, outcomes the body cannot know, and any processor name, on memory,
PostgreSQL and Redis:

* ``MemoryStore`` closes as the other stores do (``close()``, ``close_sync()``);

Run: ``.venv/bin/python -m pytest -q tests/idempotency/test_ids_and_outcomes.py`` (the
servers from ``scripts/servers.sh up``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from idempotent_consumer import (
    Idempotency,
    MemoryStore,
    RedisStore,
)

from tests.idempotency.conftest import Servers, open_store, open_sync_store

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=600)


@pytest.fixture(params=["memory", "postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


@pytest.fixture(params=["memory", "postgres", "redis"])
def sync_store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> Iterator[Any]:
    with open_sync_store(request.param, servers, table, prefix) as s:
        yield s


def counts_takeovers(store: Any) -> bool:
    return not isinstance(store, RedisStore)  # an expired Redis lease leaves no count


# -- MemoryStore closes like the others; the version --------------------------------------------


async def test_memory_store_closes_as_the_other_stores_do() -> None:
    store = MemoryStore(100)
    idem = Idempotency(store, "mem")
    async with idem.claim("e1") as claim:
        claim.complete("kept")
    await store.close()
    store.close_sync()
    async with idem.claim("e1") as again:  # nothing was closed: the records stay
        assert again.done and again.result == "kept"
