"""A consumer process for the race and kill -9 tests: claims event ids and writes one effect
per run of its handler, counted afterwards per id.

How to run (the tests start it; by hand, with the servers of ``scripts/servers.sh up``)::

    python -m tests.idempotency.racer --store pg-joined \\
        --dsn postgresql://postgres@127.0.0.1:15432/postgres \\
        --table idem_x --ids 200 --role race --seed 1

Stores: ``pg-joined`` (the effect row is written on the claim's connection, in its
transaction), ``pg`` (the effect is its own autocommit insert, before complete), ``redis``
(the effect is an RPUSH to ``<prefix>effects``). Roles: ``race`` (every id, shuffled by
seed, waiting on busy ids), ``holder`` (completes ``--complete`` ids, then holds ``--hold``
more claims mid-handler, before the effect or with ``--after-effect`` after it, and prints
HOLDING; the test kills it), ``rescue`` (every id, waiting;
prints per id how it went). ``--cache N`` puts a ``LocalCache`` of N records in front of the
store, ``--rounds R`` runs every id R times (the later rounds' repeats can be answered from
the cache). The last line on stdout is a JSON summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from datetime import timedelta
from typing import Any

import redis.asyncio as aioredis
from idempotent_consumer import Idempotency, LocalCache, PostgresStore, RedisStore


def event_ids(n: int) -> list[str]:
    return [f"evt-{i:05d}" for i in range(n)]


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--store", choices=["pg-joined", "pg", "redis"], required=True)
    p.add_argument("--role", choices=["race", "holder", "rescue"], default="race")
    p.add_argument("--dsn", default="")
    p.add_argument("--table", default="idem_race")
    p.add_argument("--redis-url", default="")
    p.add_argument("--prefix", default="race:")
    p.add_argument("--ids", type=int, default=200)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--lease-ms", type=int, default=30_000)
    p.add_argument("--complete", type=int, default=0, help="holder: ids completed first")
    p.add_argument("--hold", type=int, default=0, help="holder: claims then held mid-handler")
    p.add_argument(
        "--after-effect",
        action="store_true",
        help="holder: hold after the effect, before complete (pg-joined always does)",
    )
    p.add_argument("--start-at", type=float, default=0.0, help="epoch seconds to start at")
    p.add_argument("--cache", type=int, default=0, help="a LocalCache of this many records")
    p.add_argument("--rounds", type=int, default=1, help="race: runs of every id")
    args = p.parse_args(argv)

    store: Any
    effects: Any = None
    if args.store == "redis":
        store = RedisStore(args.redis_url, prefix=args.prefix)
        effects = aioredis.Redis.from_url(args.redis_url)
    else:
        store = PostgresStore(args.dsn, table=args.table, max_size=args.concurrency + 1)
    cache = LocalCache(store, max_items=args.cache) if args.cache else None
    idem = Idempotency(cache or store, "race", lease=timedelta(milliseconds=args.lease_ms))
    pid = os.getpid()
    outcomes: dict[str, dict[str, Any]] = {}
    block_forever = asyncio.Event()

    async def effect(event_id: str, claim: Any) -> None:
        if args.store == "pg-joined":
            await claim.connection.execute(
                f"INSERT INTO {args.table}_effects (event_id, pid) VALUES (%s, %s)", (event_id, pid)
            )
        elif args.store == "pg":
            async with store.connection() as conn:
                await conn.execute(
                    f"INSERT INTO {args.table}_effects (event_id, pid) VALUES (%s, %s)",
                    (event_id, pid),
                )
        else:
            await effects.rpush(f"{args.prefix}effects", event_id)

    async def one(event_id: str, hold: bool = False) -> None:
        started = time.monotonic()
        conn_cm: Any = store.connection() if args.store == "pg-joined" else None
        conn = await conn_cm.__aenter__() if conn_cm is not None else None
        try:
            async with idem.claim(event_id, payload=event_id, wait=True, connection=conn) as claim:
                claimed_at = time.time()  # wall clock: the test compares it across processes
                if claim.done:
                    outcomes.setdefault(event_id, {"how": "repeat"})
                else:
                    if hold:
                        if args.store == "pg-joined" or args.after_effect:
                            # pg-joined: written, never committed; else done, not completed
                            await effect(event_id, claim)
                        print(f"HOLDING {event_id} {claimed_at}", flush=True)
                        await block_forever.wait()
                    await effect(event_id, claim)
                    claim.complete(f"done-by-{pid}")
                    how = "taken_over" if claim.taken_over else "ran"
                    outcomes[event_id] = {
                        "how": how,
                        "attempts": claim.attempts,
                        "claimed_at": claimed_at,
                    }
            outcomes[event_id]["wait_s"] = round(time.monotonic() - started, 3)
        finally:
            if conn_cm is not None:
                await conn_cm.__aexit__(None, None, None)

    ids = event_ids(args.ids)
    if args.store != "redis":
        await store.pool()  # schema and partitions before the start line
    if args.start_at:
        await asyncio.sleep(max(0.0, args.start_at - time.time()))
    began = time.monotonic()
    if args.role == "holder":
        for event_id in ids[: args.complete]:
            await one(event_id)
        held = ids[args.complete : args.complete + args.hold]
        await asyncio.gather(*(one(e, hold=True) for e in held))
        return 1  # never reached: killed while holding
    queue: asyncio.Queue[str] = asyncio.Queue()
    shuffle = random.Random(args.seed).shuffle
    for _ in range(args.rounds):
        shuffle(ids)
        for event_id in ids:
            queue.put_nowait(event_id)

    async def worker() -> None:
        while not queue.empty():
            await one(queue.get_nowait())

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    elapsed = time.monotonic() - began
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o["how"]] = counts.get(o["how"], 0) + 1
    summary: dict[str, Any] = {"pid": pid, "elapsed_s": round(elapsed, 3), "counts": counts}
    if cache is not None:
        summary["cache"] = cache.stats.__dict__
    if args.role == "rescue":
        summary["outcomes"] = outcomes
    print(json.dumps(summary), flush=True)
    if effects is not None:
        await effects.aclose()
    await store.close()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
