"""One run of the idempotency benchmark: every contender on fresh ids and fresh tables, in
turns of ``chunk`` ids (``bench/idempotency.py`` repeats runs and reports them).

The machine is shared and a commit's fsync varies a lot from minute to minute, so the
contenders take turns: the order rotates every chunk, each chunk's new ids then its repeats,
and a row's figures add up its chunks. Every contender sees the same disk and the same load.
"""

from __future__ import annotations

import asyncio
import uuid
import warnings

import psycopg
import redis
import redis.asyncio as aioredis
from idempotent_consumer import (
    Idempotency,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
)
from psycopg_pool import AsyncConnectionPool

from bench.idem_contenders import (
    CONCURRENCY,
    AsyncOp,
    Op,
    Row,
    add,
    async_claim_op,
    joined_claim_op,
    powertools_op,
    sync_claim_op,
    timed,
    timed_async,
)


class Run:
    def __init__(self, dsn: str, redis_url: str, ids: int) -> None:
        self.dsn, self.redis_url, self.ids = dsn, redis_url, ids
        self.tag = uuid.uuid4().hex[:8]
        self.table = f"bench_idem_{self.tag}"
        self.bare_table = f"bench_bare_{self.tag}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.bare_table} (event_id text PRIMARY KEY)")
        self.bare_sql = (
            f"INSERT INTO {self.bare_table} (event_id) VALUES (%s) ON CONFLICT DO NOTHING"
        )
        # a pool opened at full size, as the bare rows' pool is
        self.pg_store = PostgresStore(
            dsn, table=self.table, min_size=CONCURRENCY, max_size=CONCURRENCY
        )
        self.pg = SyncIdempotency(self.pg_store, "bench")
        self.redis_client = redis.Redis.from_url(redis_url)
        self.redis_store = RedisStore(redis_url, prefix=f"bench{self.tag}:")
        self.rd = SyncIdempotency(self.redis_store, "bench")
        self._conns: list[psycopg.Connection[object]] = []

    def fresh_ids(self, n: int) -> list[str]:
        """36-character ids, as the pipeline's UUIDv4 messageIds."""
        return [str(uuid.uuid4()) for _ in range(n)]

    def sequential(self) -> dict[str, tuple[str, str | None, Op]]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        joined_conn = psycopg.connect(self.dsn, autocommit=True)
        self._conns = [conn, joined_conn]
        client = self.redis_client
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            validated = powertools_op(client, validate=True)
            keyed = powertools_op(client, validate=False)
        memory = SyncIdempotency(MemoryStore(self.ids * 8), "bench")
        bare_sql = self.bare_sql
        return {
            "pg bare INSERT": ("postgresql", None, lambda e: conn.execute(bare_sql, (e,))),
            "pg claim": ("postgresql", "pg bare INSERT", sync_claim_op(self.pg)),
            "pg claim joined": (
                "postgresql",
                "pg bare INSERT",
                joined_claim_op(self.pg, joined_conn),
            ),
            "redis bare SET NX": (
                "redis",
                None,
                lambda e: client.set(f"bare{self.tag}:{e}", b"1", nx=True, px=3_600_000),
            ),
            "redis claim": ("redis", "redis bare SET NX", sync_claim_op(self.rd)),
            "powertools redis validated": ("redis", "redis bare SET NX", validated),
            "powertools redis keyed by event": ("redis", "redis bare SET NX", keyed),
            "memory claim": ("in-process", None, sync_claim_op(memory)),
        }

    async def concurrent(self, chunk: int, rows: dict[str, Row]) -> None:
        pool = AsyncConnectionPool(
            self.dsn, min_size=CONCURRENCY, max_size=CONCURRENCY, kwargs={"autocommit": True}
        )
        await pool.open(wait=True)
        client = aioredis.Redis.from_url(self.redis_url, max_connections=CONCURRENCY * 2)

        async def pg_bare(e: str) -> object:
            async with pool.connection() as conn:
                return await conn.execute(self.bare_sql, (e,))

        async def redis_bare(e: str) -> object:
            return await client.set(f"bare{self.tag}:{e}", b"1", nx=True, px=3_600_000)

        pg_idem = Idempotency(self.pg_store, "bench")
        rd_idem = Idempotency(self.redis_store, "bench")
        suffix = f" (async x{CONCURRENCY})"
        contenders: dict[str, tuple[str, str | None, AsyncOp]] = {
            "pg bare INSERT" + suffix: ("postgresql", None, pg_bare),
            "pg claim" + suffix: ("postgresql", "pg bare INSERT" + suffix, async_claim_op(pg_idem)),
            "redis bare SET NX" + suffix: ("redis", None, redis_bare),
            "redis claim" + suffix: (
                "redis",
                "redis bare SET NX" + suffix,
                async_claim_op(rd_idem),
            ),
        }
        await async_claim_op(pg_idem)("warm-up")  # schema, partitions, pool
        names = list(contenders)
        for k in range(max(1, self.ids // chunk)):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                server, bare, op = contenders[name]
                ids = self.fresh_ids(chunk)
                new = await timed_async(op, ids, CONCURRENCY)
                repeat = await timed_async(op, ids, CONCURRENCY)
                add(rows, name, server, bare, new, repeat)
        await client.aclose()
        await pool.close()
        await self.pg_store.close()

    def run(self, chunk: int) -> dict[str, Row]:
        rows: dict[str, Row] = {}
        contenders = self.sequential()
        sync_claim_op(self.pg)("warm-up")
        names = list(contenders)
        for k in range(max(1, self.ids // chunk)):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                server, bare, op = contenders[name]
                ids = self.fresh_ids(chunk)
                add(rows, name, server, bare, timed(op, ids), timed(op, ids))
        for conn in self._conns:
            conn.close()
        asyncio.run(self.concurrent(chunk, rows))
        return rows

    def cleanup(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.bare_table}")
            conn.execute(f"DROP TABLE IF EXISTS {self.table} CASCADE")
        for pattern in (f"bench{self.tag}:*", f"bare{self.tag}:*", "test-func.bench.*"):
            keys = list(self.redis_client.scan_iter(pattern, count=5000))
            for i in range(0, len(keys), 5000):
                self.redis_client.delete(*keys[i : i + 5000])
        self.redis_client.close()
        self.redis_store.close_sync()
        self.pg_store.close_sync()
