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

Role ``chaos`` (``test_race_chaos.py``, stores ``pg-joined``, ``pg-fenced``, ``redis-fenced``):
every id until it is done, with runs that outlast the lease, transactions rolled back and
results the serializer refuses, each step printed as one line for the supervisor that kills
the racer (see the comment above :func:`chaos`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import sys
import time
import uuid
from collections import Counter, deque
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    LeaseLost,
    LocalCache,
    NotSerializable,
    PostgresStore,
    RedisStore,
)


def event_ids(n: int) -> list[str]:
    return [f"evt-{i:05d}" for i in range(n)]


async def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser()
    p.add_argument(
        "--store", choices=["pg-joined", "pg", "redis", "pg-fenced", "redis-fenced"], required=True
    )
    p.add_argument("--role", choices=["race", "holder", "rescue", "chaos"], default="race")
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
    add_chaos_arguments(p)
    args = p.parse_args(argv)
    if args.role == "chaos":
        return await chaos(args)

    store: Any
    effects: Any = None
    if args.store == "redis":
        store = RedisStore(args.redis_url, prefix=args.prefix)
        effects = aioredis.Redis.from_url(args.redis_url)
    else:
        store = PostgresStore(args.dsn, table=args.table, max_size=args.concurrency + 1)
    cache = LocalCache(store, max_items=args.cache) if args.cache else None
    target: Any = cache or store
    idem = Idempotency(target, "race", lease=timedelta(milliseconds=args.lease_ms))
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


# -- chaos: the racers of test_race_chaos.py ------------------------------------------------
#
# Every line a chaos racer prints is "<letter> <event id> [detail]", flushed at once, so the
# supervisor (tests/idempotency/test_race_chaos.py) keeps the counts of an incarnation it
# kills with SIGKILL: H claimed (detail: attempts, and slow-before / slow-after / renew / -
# for a run that outlasts its lease or renews it), E effect written, I the effect of an
# earlier holder found (none written), R the fence refused a stale holder (none written),
# L LeaseLost (detail: complete or release), W a transaction given up (detail:
# AlreadyInProgress or DeadlockDetected), N a result the serializer refused, Q a repeat
# inside the transaction that completed it, B rolled back, A a committed completion read
# back as free (an anomaly), D done (run here, or a repeat), X not done (the id goes back to
# the queue). The racer prints READY when its pool is up and a JSON summary as its last line.

#: The Redis fence: the effect is written only while the claim key holds this holder's
#: in-progress header ('p' + token, redis_store.py), and (reconciling) only if no earlier
#: holder's effect is recorded for the id. KEYS: the claim, the effects list, the effect's
#: token per id. ARGV: 'p' .. token, event id, reconcile (1/0), token.
REDIS_FENCE = """
local v = redis.call('GET', KEYS[1])
if (not v) or string.sub(v, 1, 33) ~= ARGV[1] then
  return 'R'
end
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[3], ARGV[2]) == 1 then
  return 'I'
end
redis.call('RPUSH', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[4])
return 'E'
"""

PROCESSOR = "race"


class Refused(Exception):
    """The fence refused this holder's effect: the claim is no longer its token's."""


class Rollback(Exception):
    """A batch's transaction rolled back on purpose, after its effects and completions."""


def add_chaos_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--work-ms",
        default="20,150",
        help="chaos: a run's time before and after its effect, each uniform in lo,hi",
    )
    p.add_argument(
        "--slow",
        type=float,
        default=0.0,
        help="chaos: share of runs that sleep "
        "--slow-ms before or after the effect (past the lease)",
    )
    p.add_argument("--slow-ms", default="1300,2000")
    p.add_argument(
        "--renew",
        type=float,
        default=0.0,
        help="chaos: share of the slow runs that renew their lease (claim.keep_alive)",
    )
    p.add_argument(
        "--rollback",
        type=float,
        default=0.0,
        help="chaos, pg-joined: share of "
        "transactions rolled back after their effects and completions",
    )
    p.add_argument(
        "--not-serializable",
        type=float,
        default=0.0,
        help="chaos: share of runs completing with a Decimal (NotSerializable)",
    )
    p.add_argument("--batch", type=int, default=1, help="chaos, pg-joined: ids per transaction")
    p.add_argument(
        "--redeliver",
        type=float,
        default=0.0,
        help="chaos, pg-joined: share of transactions with an id committed before (a redelivery)",
    )
    p.add_argument(
        "--in-tx-repeat",
        type=float,
        default=0.0,
        help="chaos, pg-joined: share of ids claimed twice in one transaction",
    )
    p.add_argument(
        "--slow-phase",
        choices=["either", "before", "after"],
        default="either",
        help="chaos: where a slow run sleeps: before or after its effect, or either (seeded)",
    )
    p.add_argument("--expire-ms", type=int, default=0, help="chaos: expire_after (0: default)")
    p.add_argument("--slot", type=int, default=0, help="chaos: this racer's slot")
    p.add_argument("--slots", type=int, default=1, help="chaos: racer slots in all")
    p.add_argument("--skip", default="", help="chaos: a file of ids not to run (done before)")
    p.add_argument(
        "--shared",
        type=float,
        default=1.0,
        help="chaos: share of the ids every slot runs; the others are split between the "
        "slots, each run by one slot only (a Kafka partition's owner)",
    )


def slot_ids(n: int, shared: float, slot: int, slots: int) -> list[str]:
    """The ids a slot runs: the shared ones, and every ``slots``-th of the others."""
    ids = event_ids(n)
    first = round(n * shared)
    return ids[:first] + ids[first + slot :: slots]


def say(*parts: object) -> None:
    print(" ".join(str(p) for p in parts), flush=True)  # one write: a kill cuts no line


def ms_range(text: str) -> tuple[float, float]:
    lo, hi = (float(x) / 1000 for x in text.split(","))
    return lo, hi


async def chaos(args: argparse.Namespace) -> int:
    """Run every id until it is done here: claimed and completed, or found completed."""
    rng = random.Random(args.seed)
    pid = os.getpid()
    work = ms_range(args.work_ms)
    slow = ms_range(args.slow_ms)
    counts: Counter[str] = Counter()
    store: Any
    fence_script: Any = None
    effects_client: Any = None
    if args.store == "redis-fenced":
        effects_client = aioredis.Redis.from_url(args.redis_url)  # answers bytes
        if args.slot % 2:  # the caller's own client (the store registers its scripts on it)
            store = RedisStore(prefix=args.prefix, async_client=effects_client)
        else:  # clients the store makes from its url
            store = RedisStore(args.redis_url, prefix=args.prefix)
        await store.async_client.ping()
        fence_script = effects_client.register_script(REDIS_FENCE)
    elif args.store in ("pg-fenced", "pg-joined"):
        store = PostgresStore(args.dsn, table=args.table, max_size=2 * args.concurrency + 2)
        await store.pool()
    else:
        raise SystemExit(f"chaos runs on pg-joined, pg-fenced or redis-fenced, not {args.store}")
    cache = LocalCache(store, max_items=args.cache) if args.cache else None
    target: Any = cache or store
    lease = timedelta(milliseconds=args.lease_ms)
    if args.expire_ms:
        expire = timedelta(milliseconds=args.expire_ms)
        idem = Idempotency(target, PROCESSOR, lease=lease, expire_after=expire)
    else:
        idem = Idempotency(target, PROCESSOR, lease=lease)
    insert = f"INSERT INTO {args.table}_effects (event_id, pid, token) VALUES (%s, %s, %s)"

    def timing() -> tuple[float, float, str]:
        """(before the effect, after it, kind): a share of runs outlast the lease."""
        before, after, kind = rng.uniform(*work), rng.uniform(*work), "-"
        if rng.random() < args.slow:
            if rng.random() < args.renew:
                kind, before = "renew", rng.uniform(*slow)
            elif args.slow_phase == "before" or (
                args.slow_phase == "either" and rng.random() < 0.5
            ):
                kind, before = "slow-before", rng.uniform(*slow)
            else:
                kind, after = "slow-after", rng.uniform(*slow)
        return before, after, kind

    def result() -> object:
        return Decimal("9.99") if rng.random() < args.not_serializable else f"done-by-{pid}"

    async def fence(event_id: str, token: str, reconcile: bool) -> str:
        """Write the effect if the claim still holds ``token``: E written, R refused (a
        stale holder), I an earlier holder's effect found (``reconcile``: this claim may
        have taken the event over from a holder killed after its effect)."""
        if fence_script is not None:
            keys = [
                store.key(PROCESSOR, event_id),
                f"{args.prefix}effects",
                f"{args.prefix}effect-token",
            ]
            argv = [b"p" + token.encode(), event_id, "1" if reconcile else "0", token]
            verdict = await fence_script(keys=keys, args=argv)
            return bytes(verdict).decode()
        async with store.connection() as conn, conn.transaction():
            # The claim's row, locked: a takeover (an UPDATE of the token) waits for this
            # transaction, or has committed and the row no longer matches.
            cur = await conn.execute(
                f"SELECT 1 FROM {args.table} WHERE processor = %s AND event_id = %s "
                "AND token = %s AND state = 'p' FOR UPDATE",
                (PROCESSOR, event_id, uuid.UUID(hex=token)),
            )
            if await cur.fetchone() is None:
                return "R"
            if reconcile:
                cur = await conn.execute(
                    f"SELECT 1 FROM {args.table}_effects WHERE event_id = %s LIMIT 1", (event_id,)
                )
                if await cur.fetchone() is not None:
                    return "I"
            await conn.execute(insert, (event_id, pid, token))
            return "E"

    async def fenced(event_id: str) -> bool:
        before, after, kind = timing()
        finished = False
        try:
            async with idem.claim(event_id, payload=event_id, wait=True) as claim:
                if claim.done:
                    counts["repeat"] += 1
                    say("D", event_id)
                    return True
                say("H", event_id, claim.attempts or "-", kind)
                renewing = claim.keep_alive() if kind == "renew" else contextlib.nullcontext()
                async with renewing:
                    await asyncio.sleep(before)
                    # PostgreSQL counts takeovers: attempts 1 is a first claim, with no
                    # earlier effect to look for. Redis keeps no trace of an expired claim
                    # (attempts None): every holder looks.
                    verdict = await fence(event_id, claim.token, claim.attempts != 1)
                    say(verdict, event_id)
                    if verdict == "R":
                        raise Refused(event_id)
                    await asyncio.sleep(after)
                finished = True
                claim.complete(result())
        except LeaseLost:
            say("L", event_id, "complete" if finished else "release")
            say("X", event_id)
            return False
        except Refused:  # refused, yet released: the fence and the store disagree
            say("A", event_id)
            say("X", event_id)
            return False
        except NotSerializable:  # the claim completed, with no result
            say("N", event_id)
        say("D", event_id)
        return True

    committed: list[str] = []  # ids done in this process's committed transactions

    async def read_back(event_id: str) -> None:
        # Outside any transaction: a committed completion, which a LocalCache keeps.
        try:
            async with idem.claim(event_id, payload=event_id) as claim:
                if not claim.done:
                    say("A", event_id)
                    raise Rollback(event_id)  # released
        except (AlreadyInProgress, Rollback):
            pass

    async def joined(batch: list[str]) -> bool:
        plan = sorted(set(batch))
        if committed and rng.random() < args.redeliver:
            plan = sorted(set(plan) | {rng.choice(committed)})
        # Locks in id order (no deadlock between two batches); a repeat of an id already
        # claimed in this transaction takes no new lock.
        plan += [e for e in plan if rng.random() < args.in_tx_repeat]
        rolled_back = rng.random() < args.rollback
        ran: list[str] = []
        try:
            async with store.connection() as conn, conn.transaction():
                for event_id in plan:
                    before, after, kind = timing()
                    async with idem.claim(
                        event_id, payload=event_id, wait=True, connection=conn
                    ) as claim:
                        if claim.done:
                            if event_id in ran:
                                say("Q", event_id)
                            counts["repeat"] += 1
                            continue
                        say("H", event_id, claim.attempts or "-", kind)
                        await asyncio.sleep(before)
                        await conn.execute(insert, (event_id, pid, claim.token))
                        say("E", event_id)
                        await asyncio.sleep(after)
                        ran.append(event_id)
                        try:
                            claim.complete(result())
                        except NotSerializable:  # caught here, or it rolls the batch back
                            say("N", event_id)
                if rolled_back:
                    raise Rollback()
        except Rollback:
            for event_id in ran:
                say("B", event_id)
                say("X", event_id)
            return False
        except (psycopg.errors.DeadlockDetected, AlreadyInProgress) as exc:
            # AlreadyInProgress: another transaction held an id longer than the wait
            # allows (a joined claim with wait=True waits at most a lease)
            say("W", plan[0], type(exc).__name__)
            for event_id in ran:
                say("X", event_id)
            return False
        for event_id in sorted(set(plan) & set(batch)):  # done: run here, or a repeat
            say("D", event_id)
        committed.extend(plan)
        for event_id in ran:
            await read_back(event_id)
        return True

    ids = slot_ids(args.ids, args.shared, args.slot, args.slots)
    if args.skip:  # done by this slot before (a restarted consumer resumes at its offset)
        skip = set((await asyncio.to_thread(Path(args.skip).read_text)).split())
        ids = [e for e in ids if e not in skip]
    rng.shuffle(ids)
    queue = deque(ids)
    say("READY", pid)
    began = time.monotonic()

    async def worker() -> None:
        while queue:
            if args.store == "pg-joined":
                batch = [
                    queue.popleft() for _ in range(min(len(queue), rng.randint(1, args.batch)))
                ]
                ok = await joined(batch)
            else:
                batch = [queue.popleft()]
                ok = await fenced(batch[0])
            if not ok:
                queue.extend(batch)
                await asyncio.sleep(0.02)

    await asyncio.gather(*(worker() for _ in range(args.concurrency)))
    summary: dict[str, Any] = {
        "pid": pid,
        "elapsed_s": round(time.monotonic() - began, 3),
        "counts": dict(counts),
    }
    if cache is not None:
        summary["cache"] = cache.stats.__dict__
    say(json.dumps(summary))
    await store.close()  # closes the clients it made, not the caller's
    if effects_client is not None:
        await effects_client.aclose()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main(sys.argv[1:])))
