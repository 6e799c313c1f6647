"""The local cache on the real PostgreSQL and Redis: a repeat answered in-process, and never
an effect run twice because of it.

From the cache: a completed id whose record is then deleted on the server behind the cache's
back is still answered as a repeat with its first result (the bare store, asked the same,
runs it again). Bounded: the least recently used records go. Never in progress: a live claim
elsewhere, a released claim and a joined completion rolled back are not cached. Racing
processes, each with its own cache, each running every id twice: one effect per id.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
import redis
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    LocalCache,
    PayloadMismatch,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
)

from tests.idempotency.conftest import Servers
from tests.idempotency.racer import event_ids
from tests.idempotency.test_race_and_kill import (
    effects_per_id,
    make_effects_table,
    racer,
    summary_of,
)

pytestmark = pytest.mark.idempotency


def build(kind: str, servers: Servers, table: str, prefix: str) -> Any:
    if kind == "postgres":
        return PostgresStore(servers.dsn, table=table, max_size=4)
    return RedisStore(servers.redis_url, prefix=prefix)


def delete_behind(kind: str, servers: Servers, table: str, prefix: str, event_id: str) -> None:
    """Delete the record on the server itself, as nothing in this process would."""
    if kind == "postgres":
        with psycopg.connect(servers.dsn, autocommit=True) as conn:
            gone = conn.execute(f"DELETE FROM {table} WHERE event_id = %s", (event_id,))
            assert gone.rowcount == 1
        return
    client = redis.Redis.from_url(servers.redis_url)
    assert client.delete(f"{prefix}p:{event_id}") == 1
    client.close()


@pytest.fixture(params=["postgres", "redis"])
async def kind(request: pytest.FixtureRequest) -> AsyncIterator[str]:
    yield str(request.param)


async def test_a_repeat_is_answered_from_the_cache(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store = build(kind, servers, table, prefix)
    cache = LocalCache(store, max_items=100)
    cached, bare = Idempotency(cache, "p"), Idempotency(store, "p")
    runs: list[str] = []

    async def charge() -> str:
        runs.append("e1")
        return "ch_1"

    assert await cached.once("e1", charge, payload=b"v") == "ch_1"
    delete_behind(kind, servers, table, prefix, "e1")
    hits = cache.stats.hits
    assert await cached.once("e1", charge, payload=b"v") == "ch_1"  # from the cache
    assert cache.stats.hits == hits + 1 and runs == ["e1"]
    async with bare.claim("e1", payload=b"v") as claim:  # the store alone forgot it
        assert not claim.done
    await store.close()


def test_a_repeat_is_answered_from_the_cache_sync(
    servers: Servers, table: str, prefix: str
) -> None:
    for kind in ("postgres", "redis"):
        store = build(kind, servers, table, prefix)
        cache = LocalCache(store, max_items=100)
        idem = SyncIdempotency(cache, "p")
        with idem.claim("s1") as claim:
            claim.complete({"charge": "ch_s1"})
        delete_behind(kind, servers, table, prefix, "s1")
        with idem.claim("s1") as claim:
            assert claim.done and claim.result == {"charge": "ch_s1"}
        assert cache.stats.hits == 1
        store.close_sync()


async def test_bounded_least_recently_used_go_first(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store = build(kind, servers, table, prefix)
    cache = LocalCache(store, max_items=3)
    idem = Idempotency(cache, "p")
    for i in range(5):
        await idem.once(f"b{i}", _returns(f"r{i}"))
    assert cache.size == 3 and cache.stats.evictions == 2
    misses = cache.stats.misses
    for i in reversed(range(5)):  # b4-b2 cached; b1, b0 evicted: asked of the store
        async with idem.claim(f"b{i}") as claim:
            assert claim.done and claim.result == f"r{i}"
    assert cache.stats.misses == misses + 2  # (still repeats there)
    assert cache.stats.hits == 3
    await store.close()


async def test_a_live_claim_elsewhere_is_never_cached(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store = build(kind, servers, table, prefix)
    cache = LocalCache(store)
    holder, cached = Idempotency(store, "p"), Idempotency(cache, "p")
    async with holder.claim("h1") as held:
        with pytest.raises(AlreadyInProgress):
            async with cached.claim("h1"):
                pytest.fail("a live claim was answered")
        assert cache.size == 0
        held.complete("first")
    async with cached.claim("h1") as claim:  # completed now: read from the store, then cached
        assert claim.done and claim.result == "first"
    assert cache.size == 1
    await store.close()


async def test_a_released_claim_runs_again(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store = build(kind, servers, table, prefix)
    cache = LocalCache(store)
    idem = Idempotency(cache, "p")
    with pytest.raises(RuntimeError):
        async with idem.claim("r1"):
            raise RuntimeError("handler failed")
    assert cache.size == 0
    async with idem.claim("r1") as claim:
        assert not claim.done
        claim.complete("second try")
    await store.close()


async def test_another_payload_is_asked_of_the_store(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store = build(kind, servers, table, prefix)
    cache = LocalCache(store)
    idem = Idempotency(cache, "p")
    await idem.once("m1", _returns("x"), payload=b"one")
    misses = cache.stats.misses
    with pytest.raises(PayloadMismatch):
        await idem.once("m1", _returns("y"), payload=b"two")
    assert cache.stats.misses == misses + 1
    await store.close()


async def test_a_joined_completion_rolled_back_is_not_cached(servers: Servers, table: str) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    cache = LocalCache(store)
    idem = Idempotency(cache, "p")
    async with store.connection() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():  # the caller's transaction, the claim a savepoint
                async with idem.claim("j1", connection=conn) as claim:
                    claim.complete("charged")
                # the store completed the record (in the savepoint), uncommitted
                raise RuntimeError("the caller's transaction fails after the claim block")
    assert cache.size == 0
    async with store.connection() as conn, idem.claim("j1", connection=conn) as claim:
        assert not claim.done  # the effect runs: nothing was committed
        claim.complete("charged")
    assert cache.size == 0  # committed, but cached only once a claim reads it back
    async with idem.claim("j1") as claim:
        assert claim.done and claim.result == "charged"
    assert cache.size == 1
    await store.close()


@pytest.mark.parametrize("store", ["pg", "redis"])
def test_racing_processes_with_caches_one_effect_per_id(
    servers: Servers, table: str, prefix: str, store: str, figures: list[str]
) -> None:
    processes, ids = 4, 300
    make_effects_table(servers, table)
    start_at = time.time() + 4.0
    procs = [
        racer(
            servers,
            store,
            table,
            prefix,
            *("--ids", str(ids), "--seed", str(seed), "--start-at", str(start_at)),
            *("--cache", "1000", "--rounds", "2"),
        )
        for seed in range(processes)
    ]
    summaries = [summary_of(p, 180) for p in procs]
    effects = effects_per_id(servers, store, table, prefix)
    assert set(effects) == set(event_ids(ids)), "an id without its effect"
    assert max(effects.values()) == 1, {k: v for k, v in effects.items() if v > 1}
    ran = [s["counts"].get("ran", 0) for s in summaries]
    hits = [s["cache"]["hits"] for s in summaries]
    assert sum(ran) == ids
    assert sum(1 for r in ran if r) >= 2, f"no race: one process ran everything {ran}"
    assert all(h > 0 for h in hits), f"a process never answered from its cache: {hits}"
    figures.append(
        f"local cache race [{store}]: {processes} processes x 8 tasks x {ids} ids x 2 rounds, "
        f"each its own cache: effects per id min {min(effects.values())} max "
        f"{max(effects.values())}; ran per process {ran}; answered from the cache {hits}"
    )


def _returns(value: str) -> Any:
    async def fn() -> str:
        return value

    return fn
