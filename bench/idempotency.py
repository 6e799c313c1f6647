"""Idempotency benchmark: claims/s and p99 per store, beside the bare operation on the same
server in the same run, and beside Powertools' idempotency on the same Redis.

    make bench-idempotency                              # servers up, then the defaults below
    python -m bench.idempotency                         # 4,000 ids per contender and phase
    python -m bench.idempotency --ids 1000              # quicker

Needs the PostgreSQL and Redis of ``scripts/servers.sh up`` (``--dsn`` / ``--redis-url`` for
others). Each contender runs two phases on fresh ids: *new* (the first claim of each id and
its completion, as a consumer's first delivery) and *repeat* (the same ids again: a
redelivery, answered from the record). One operation is timed from the call to the result:

- ``pg bare INSERT``: ``INSERT ... ON CONFLICT DO NOTHING`` of the id alone (autocommit): the
  floor of any PostgreSQL claim. ``pg claim``: ``PostgresStore`` claim + complete, each its
  own statement and commit. ``pg claim joined``: the claim and its completion in one
  transaction on the caller's connection (BEGIN, claim, complete, COMMIT: where an effect
  written on that connection would commit with them);
- ``redis bare SET NX``: ``SET id 1 NX PX``. ``redis claim``: ``RedisStore`` (``SET NX GET PX``
  + the complete script). ``powertools redis``: aws-lambda-powertools' ``idempotent_function``
  with its Redis persistence layer (``CachePersistenceLayer``) on the same server, outside
  Lambda (no lambda context: its in-progress lease is absent and it warns once);
- ``memory claim``: ``MemoryStore`` (in-process, no server);
- ``async x16`` rows: the same claims from 16 asyncio tasks on a pool (PostgreSQL) or one
  client (Redis), beside the bare operation at the same concurrency.

Sequential rows use one connection and one thread, so they measure round trips and commits.
The machine is shared and a commit's fsync varies a lot from minute to minute, so the
contenders take turns in chunks of ``--chunk`` ids (250; the order rotates every chunk, each
chunk's new ids then its repeats): every contender sees the same disk and the same load, and
a row's figures add up its chunks. The results are printed and written to
bench/results-idempotency.md.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import platform
import time
import uuid
import warnings
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

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

from bench.measure import percentile
from bench.results_file import write_latest

RESULTS = Path(__file__).with_name("results-idempotency.md")
METHOD = (
    "`make bench-idempotency` (`python -m bench.idempotency`; its docstring and "
    "docs/benchmarks.md): every contender on the same servers, in turns, new ids then repeats."
)
TARGET = (
    "a claim's cost next to the bare write it wraps (INSERT, SET NX) on the same server in the "
    "same run; a change must not make it slower, measured back to back."
)
CONCURRENCY = 16


@dataclass
class Phase:
    ops: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies_ms, q) or 0.0


@dataclass
class Row:
    name: str
    server: str
    bare: str | None  # the row this one is compared with
    new: Phase
    repeat: Phase


Op = Callable[[str], object]
AsyncOp = Callable[[str], Awaitable[object]]


def timed(op: Op, ids: list[str]) -> Phase:
    latencies: list[float] = []
    started = time.perf_counter()
    for event_id in ids:
        t = time.perf_counter_ns()
        op(event_id)
        latencies.append((time.perf_counter_ns() - t) / 1e6)
    return Phase(len(ids), time.perf_counter() - started, latencies)


async def timed_async(op: AsyncOp, ids: list[str], concurrency: int) -> Phase:
    latencies: list[float] = []
    queue = list(reversed(ids))

    async def worker() -> None:
        while queue:
            event_id = queue.pop()
            t = time.perf_counter_ns()
            await op(event_id)
            latencies.append((time.perf_counter_ns() - t) / 1e6)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Phase(len(ids), time.perf_counter() - started, latencies)


# -- contenders: each returns (new-phase op, repeat-phase op); the same op serves both ----


def sync_claim_op(idem: SyncIdempotency) -> Op:
    def op(event_id: str) -> object:
        with idem.claim(event_id) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


def joined_claim_op(idem: SyncIdempotency, conn: psycopg.Connection[Any]) -> Op:
    def op(event_id: str) -> object:
        # no transaction open on conn: the claim block is the transaction (BEGIN, claim,
        # complete, COMMIT); effects written on conn inside it commit with it
        with idem.claim(event_id, connection=conn) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


def async_claim_op(idem: Idempotency) -> AsyncOp:
    async def op(event_id: str) -> object:
        async with idem.claim(event_id) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


def powertools_op(client: redis.Redis) -> Op:
    from aws_lambda_powertools.utilities.idempotency import (
        IdempotencyConfig,
        idempotent_function,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence.cache import (
        CachePersistenceLayer,
    )

    layer = CachePersistenceLayer(client=client)
    config = IdempotencyConfig(event_key_jmespath="id", expires_after_seconds=3600)

    @idempotent_function(data_keyword_argument="event", persistence_store=layer, config=config)
    def handle(event: dict[str, str]) -> str:
        return "ch_" + event["id"]

    def op(event_id: str) -> object:
        return handle(event={"id": event_id})

    return op


class Bench:
    def __init__(self, dsn: str, redis_url: str, ids: int) -> None:
        self.dsn, self.redis_url, self.ids = dsn, redis_url, ids
        self.tag = uuid.uuid4().hex[:8]
        self.table = f"bench_idem_{self.tag}"
        self.bare_table = f"bench_bare_{self.tag}"
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(f"CREATE TABLE {self.bare_table} (event_id text PRIMARY KEY)")
        # a pool opened at full size, as the bare rows' pool is
        self.pg_store = PostgresStore(
            dsn, table=self.table, min_size=CONCURRENCY, max_size=CONCURRENCY
        )
        self.pg = SyncIdempotency(self.pg_store, "bench")
        self.redis_client = redis.Redis.from_url(redis_url)
        self.redis_store = RedisStore(redis_url, prefix=f"bench{self.tag}:")
        self.rd = SyncIdempotency(self.redis_store, "bench")

    def fresh_ids(self, n: int) -> list[str]:
        """36-character ids, as the pipeline's UUIDv4 messageIds."""
        return [str(uuid.uuid4()) for _ in range(n)]

    def sequential(self) -> dict[str, tuple[str, str | None, Op]]:
        conn = psycopg.connect(self.dsn, autocommit=True)
        self._conns = [conn]
        bare_sql = f"INSERT INTO {self.bare_table} (event_id) VALUES (%s) ON CONFLICT DO NOTHING"
        joined_conn = psycopg.connect(self.dsn, autocommit=True)
        self._conns.append(joined_conn)
        client = self.redis_client
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            powertools = powertools_op(client)
        memory = SyncIdempotency(MemoryStore(self.ids * 8), "bench")
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
            "powertools redis": ("redis", "redis bare SET NX", powertools),
            "memory claim": ("in-process", None, sync_claim_op(memory)),
        }

    async def concurrent(self, chunk: int, rows: dict[str, Row]) -> None:
        pool = AsyncConnectionPool(
            self.dsn, min_size=CONCURRENCY, max_size=CONCURRENCY, kwargs={"autocommit": True}
        )
        await pool.open(wait=True)
        client = aioredis.Redis.from_url(self.redis_url, max_connections=CONCURRENCY * 2)
        bare_sql = f"INSERT INTO {self.bare_table} (event_id) VALUES (%s) ON CONFLICT DO NOTHING"

        async def pg_bare(e: str) -> object:
            async with pool.connection() as conn:
                return await conn.execute(bare_sql, (e,))

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
            progress(rows, names, k)
        await client.aclose()
        await pool.close()
        await self.pg_store.close()

    def run(self, chunk: int) -> list[Row]:
        rows: dict[str, Row] = {}
        contenders = self.sequential()
        sync_claim_op(self.pg)("warm-up")
        names = list(contenders)
        for k in range(max(1, self.ids // chunk)):
            for name in names[k % len(names) :] + names[: k % len(names)]:
                server, bare, op = contenders[name]
                ids = self.fresh_ids(chunk)
                add(rows, name, server, bare, timed(op, ids), timed(op, ids))
            progress(rows, names, k)
        for conn in self._conns:
            conn.close()
        asyncio.run(self.concurrent(chunk, rows))
        return list(rows.values())

    def cleanup(self) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {self.bare_table}")
            conn.execute(f"DROP TABLE IF EXISTS {self.table} CASCADE")
        for pattern in (f"bench{self.tag}:*", f"bare{self.tag}:*", "handle*"):
            keys = list(self.redis_client.scan_iter(pattern, count=5000))
            for i in range(0, len(keys), 5000):
                self.redis_client.delete(*keys[i : i + 5000])
        self.redis_client.close()
        self.redis_store.close_sync()
        self.pg_store.close_sync()


def add(
    rows: dict[str, Row], name: str, server: str, bare: str | None, new: Phase, repeat: Phase
) -> None:
    """Add one chunk's phases to the contender's row."""
    row = rows.get(name)
    if row is None:
        rows[name] = Row(name, server, bare, new, repeat)
        return
    for total, part in ((row.new, new), (row.repeat, repeat)):
        total.ops += part.ops
        total.seconds += part.seconds
        total.latencies_ms.extend(part.latencies_ms)


def progress(rows: dict[str, Row], names: list[str], k: int) -> None:
    if (k + 1) % 4:
        return
    done = ", ".join(f"{n} {rows[n].new.rate:,.0f}/{rows[n].repeat.rate:,.0f}" for n in names)
    print(f"  after {k + 1} chunks (new/repeat claims/s): {done}", flush=True)


def render(rows: list[Row]) -> str:
    by_name = {r.name: r for r in rows}
    lines = [
        "| contender | server | new ids: claims/s | p50 ms | p99 ms | repeats: claims/s "
        "| p99 ms | new vs bare | repeats vs bare |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        base = by_name.get(r.bare) if r.bare else None
        vs_new = f"{r.new.rate / base.new.rate:.2f}x" if base else ""
        vs_rep = f"{r.repeat.rate / base.repeat.rate:.2f}x" if base else ""
        lines.append(
            f"| {r.name} | {r.server} | {r.new.rate:,.0f} | {r.new.p(50):.2f} | "
            f"{r.new.p(99):.2f} | {r.repeat.rate:,.0f} | {r.repeat.p(99):.2f} | "
            f"{vs_new} | {vs_rep} |"
        )
    return "\n".join(lines)


def ratios(rows: list[Row]) -> list[str]:
    by_name = {r.name: r for r in rows}

    def ratio(a: str, b: str, phase: str) -> str:
        ra, rb = by_name.get(a), by_name.get(b)
        if not ra or not rb:
            return "n/a"
        pa, pb = getattr(ra, phase), getattr(rb, phase)
        return f"{pa.rate / pb.rate:.2f}x"

    out = []
    for a, b in (
        ("pg claim", "pg bare INSERT"),
        ("pg claim joined", "pg bare INSERT"),
        ("redis claim", "redis bare SET NX"),
        ("redis claim", "powertools redis"),
        (f"pg claim (async x{CONCURRENCY})", f"pg bare INSERT (async x{CONCURRENCY})"),
        (f"redis claim (async x{CONCURRENCY})", f"redis bare SET NX (async x{CONCURRENCY})"),
    ):
        out.append(f"- {a} / {b}: new ids {ratio(a, b, 'new')}, repeats {ratio(a, b, 'repeat')}")
    return out


def machine(dsn: str, redis_url: str) -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        fsync = conn.execute("SHOW synchronous_commit").fetchone()
    client = redis.Redis.from_url(redis_url)
    info = client.info("server")
    persistence = client.info("persistence")
    client.close()
    versions = ", ".join(
        f"{n} {metadata.version(n)}"
        for n in ("psycopg", "redis", "aws-lambda-powertools", "idempotent-consumer")
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores ({cpu}); Python "
        f"{platform.python_version()}, {versions}; PostgreSQL {row[0] if row else '?'} "
        f"(synchronous_commit {fsync[0] if fsync else '?'}), Redis {info['redis_version']} "
        f"(appendonly {'yes' if persistence.get('aof_enabled') else 'no'}, appendfsync everysec)"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ids", type=int, default=4_000, help="ids per contender (4,000)")
    parser.add_argument("--chunk", type=int, default=250, help="ids per turn (250)")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:15432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    started = time.monotonic()
    bench = Bench(args.dsn, args.redis_url, args.ids)
    try:
        rows = bench.run(args.chunk)
    finally:
        bench.cleanup()
    took = time.monotonic() - started
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    section = "\n".join(
        [
            f"## {when} `python -m bench.idempotency --ids {args.ids} --chunk {args.chunk}`",
            "",
            machine(args.dsn, args.redis_url),
            "",
            render(rows),
            "",
            "Ratios (claims/s, same server, same run):",
            "",
            *ratios(rows),
            "",
            f"{args.ids:,} ids per contender and phase, in turns of {args.chunk}; "
            f"the run took {took:.0f} s.",
            "",
        ]
    )
    print(section)
    if not args.no_write:
        write_latest(
            RESULTS, "Idempotency benchmark: claims/s and p99 per store", METHOD, TARGET, section
        )
        print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
