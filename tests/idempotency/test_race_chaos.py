"""The race harness: racers killed with SIGKILL at random, leases that end under
running handlers, transactions rolled back; at the end every id has exactly one effect.

Processes (PostgreSQL, Redis): ``PROCESSES`` racers (``tests/idempotency/racer.py``, role
``chaos``) of ``CONCURRENCY`` tasks each run ``IDS`` ids until each is done (completed here,
or found completed); a failed run puts its id back in the racer's queue. Half of the ids
are raced by every racer, in orders of their own; the other half are split between the
racer slots, each id run by one slot only, as a Kafka partition's records by its owner (so
another process cannot hide a wrong "done", e.g. a cache's). A supervisor kills a random
racer with SIGKILL every 0.1-0.5 s, ``KILLS`` times (half the kills wait, up to 1.5 s, for a
holder between its effect and its completion) and starts a new racer in the slot, which
runs the shared ids again and skips the slot's own ids already done (a consumer restarted
at its committed offset); ``PAUSES`` times it stops a racer instead (SIGSTOP, 1.3-2 s: past
its leases, a stop-the-world pause) and lets it run on (SIGCONT) as a stale holder.
A run sleeps 30-200 ms before its effect and as long after it
(before ``complete``); 8% of the runs outlast the 1 s lease by sleeping 1.3-2 s before or
after the effect, so the next claim takes the event over while the holder still runs (a
quarter of those renew the lease with ``claim.keep_alive()`` instead); 5% complete with a
``Decimal`` (``NotSerializable``: the claim completes with no result, the effect must not
run again).

* ``pg-joined``: the effect row is written on the claim's connection, in a transaction of
  1-3 ids (a batch, claimed in id order) with repeats of its own ids (15%) and a
  redelivery of an id committed before (30% of the batches), behind a ``LocalCache`` that
  each committed id is read back into; 20% of the transactions roll back after their
  effects and completions, and a kill rolls back whatever its racer had open. A joined
  claim waits at most a lease for another transaction (``AlreadyInProgress``: the batch
  is given up and retried).
* ``pg-fenced``: claims not joined; the effect is fenced by ``claim.token``: one
  transaction locks the claim's row only while it holds this token and is in progress
  (``FOR UPDATE``: a takeover's update of the token waits for it, or has committed and the
  row no longer matches), and a claim that took the event over (``attempts`` > 1) first
  looks for the effect of the holder it replaced (killed, or slow, after its effect) and
  writes none if it is there. A first claim (``attempts`` 1) does not look: a store that
  called a takeover a first claim would double the effect.
* ``redis-fenced``: the same fence as a Lua script on the claim key (its value starts with
  ``'p'`` and the holder's token, redis_store.py); Redis keeps no trace of an expired claim
  (``attempts`` None), so every holder looks for an earlier effect, in the script. The
  racers of odd slots give the store their own async client, the others a url.

A stale holder's effect refused by the fence is no effect; its ``release`` (or, slow after
its effect, its ``complete``) raises ``LeaseLost``, counted. At the end: the effects per id
(exactly 1 each; else the ids with none or more, and the seed), every record completed, and
counts showing that the chaos happened (kills of racers holding claims, some between effect
and completion; takeovers and stale holders refused; rollbacks, repeats inside a
transaction and results refused on pg-joined), so the test cannot pass without a race.

Memory: a ``MemoryStore`` lives in one process, so the racers are asyncio tasks (``TASKS``
racers of 3 tasks each) killed with ``task.cancel()`` (``KILLS_MEMORY`` times, every 0-100 ms)
and restarted, with a 300 ms lease and 10% of the runs slow (400-700 ms); the fence is
``claim.extend()`` (``LeaseLost`` once taken over) followed by the effect with no ``await``
in between, in the one event loop; two threads run the same ids through
``SyncIdempotency`` (fence and effect under one lock). Each racer also calls two decorated
functions (``idempotent_function``), ``charge`` and ``refund``, with the same ids: each
must run once per id, in its own namespace. A last pass finds every id done, everywhere.

Checked against broken copies of the library (PYTHONPATH, not committed): the harness fails
when a takeover is reported as a first claim (pg-fenced: ids with 2 effects), when the
LocalCache keeps an answer read inside a transaction (1.0's lost effect; pg-joined: ids
with none), when a refused result releases the claim (pg-fenced and memory: 2-3 effects),
when a cancelled body releases it (memory), and when decorated functions share one
namespace (memory: refund never runs).

Sizes: 4 processes x 4 tasks x 300 ids, 8 kills and 2 pauses per store, memory 6 racers x
3 tasks + 2 threads x 300 ids and 40 cancellations: 8-16 s per store and 2-3 s for memory
on 2 CPUs (the range: other work on the machine), 40-50 s in all. The schema and partitions
are made before the racers start (test_race_first_use.py has racers' first use).
``DEDUPE_RACE_IDS``, ``DEDUPE_RACE_PROCESSES`` and ``DEDUPE_RACE_KILLS``
make a soak (memory cancels 5 x the kills, on at most 1000 ids); ``DEDUPE_RACE_SEED``
replays a failure's schedule (each racer's order, slow runs and rollbacks, the supervisor's
victims and pauses; not the machine's timing).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from idempotent_consumer import (
    Idempotency,
    LeaseLost,
    MemoryStore,
    NotSerializable,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
    idempotent_function,
)

from tests.idempotency.conftest import Servers
from tests.idempotency.racer import PROCESSOR, event_ids
from tests.support import ROOT

pytestmark = pytest.mark.idempotency

IDS = int(os.environ.get("DEDUPE_RACE_IDS", "300"))
PROCESSES = int(os.environ.get("DEDUPE_RACE_PROCESSES", "4"))
KILLS = int(os.environ.get("DEDUPE_RACE_KILLS", "8"))
CONCURRENCY = 4
SHARED = 0.5  # share of the ids every racer runs; each of the others has one racer slot
LEASE_MS = 1000
TASKS = 6  # memory: racer tasks (3 sub-tasks each) beside 2 threads
KILLS_MEMORY = 5 * KILLS
PAUSES = max(1, KILLS // 4)  # racers stopped (SIGSTOP) past their leases, then continued
MEMORY_IDS = min(IDS, 1000)  # its slots grow with the square of the ids


def race_seed() -> int:
    given = os.environ.get("DEDUPE_RACE_SEED")
    return int(given) if given else random.SystemRandom().randrange(1 << 32)


# -- processes: the supervisor ---------------------------------------------------------------


@dataclass
class Racer:
    """One incarnation of a racer process."""

    popen: subprocess.Popen[str]
    seed: int
    slot: int  # its share of the ids: a racer killed is restarted in its slot
    stderr: Path
    ready: threading.Event = field(default_factory=threading.Event)
    held: dict[str, str] = field(default_factory=dict)  # id -> "H" claimed, "E" effect written
    summary: dict[str, Any] | None = None
    reader: threading.Thread | None = None


@dataclass
class Kill:
    seed: int
    held: int  # ids its racer held (claimed, not done)
    after_effect: int  # of those, ids whose effect was written, not yet completed
    aimed: bool  # the supervisor waited for a holder between effect and completion


class Supervisor:
    def __init__(self, cmd: list[str], tmp: Path, seed: int, slots: int) -> None:
        self.cmd = cmd
        self.slots = slots
        self.owned = set(event_ids(IDS)[round(IDS * SHARED) :])  # each run by one slot only
        self.done_by_slot: dict[int, set[str]] = {}
        self.tmp = tmp
        self.seed = seed
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.events: Counter[str] = Counter()  # line letters and details, over all racers
        self.per_id: dict[str, Counter[str]] = {}
        self.done: set[str] = set()
        self.kills: list[Kill] = []
        self.pauses: list[Kill] = []  # SIGSTOP ... SIGCONT
        self.racers: list[Racer] = []
        self.exited: list[Racer] = []
        self.started = 0

    def start(self, slot: int) -> Racer:
        self.started += 1
        seed = self.seed * 1000 + self.started
        stderr = self.tmp / f"racer-{self.started}.err"
        # A slot's own ids that it has done are not run again (a consumer restarted at its
        # committed offset): a wrong "done" there stays wrong, not hidden by a fresh run.
        skip = self.tmp / f"racer-{self.started}.skip"
        with self.lock:
            skip.write_text("\n".join(sorted(self.done_by_slot.get(slot, set()) & self.owned)))
        args = ["--seed", str(seed), "--slot", str(slot), "--slots", str(self.slots)]
        popen = subprocess.Popen(
            [*self.cmd, *args, "--skip", str(skip)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=stderr.open("w"),
            text=True,
        )
        racer = Racer(popen, seed, slot, stderr)
        racer.reader = threading.Thread(target=self._read, args=(racer,), daemon=True)
        racer.reader.start()
        self.racers.append(racer)
        return racer

    def _read(self, racer: Racer) -> None:
        assert racer.popen.stdout is not None
        for line in racer.popen.stdout:
            try:
                self._parse(racer, line)
            except Exception:  # never expected; a reader that stopped would stall its racer
                with self.lock:
                    self.events["garbled"] += 1

    def _parse(self, racer: Racer, line: str) -> None:
        if line.startswith("{"):
            racer.summary = json.loads(line)
            return
        parts = line.split()
        if parts[:1] == ["READY"]:
            racer.ready.set()
            return
        letter, event_id, detail = parts[0], parts[1], parts[2:]
        with self.lock:
            self.events[letter] += 1
            self.per_id.setdefault(event_id, Counter())[letter] += 1
            if letter == "H":
                racer.held[event_id] = "H"
                attempts, kind = detail
                if attempts not in ("-", "1"):
                    self.events["takeover"] += 1
                if kind != "-":
                    self.events[kind] += 1
            elif letter == "E" and event_id in racer.held:
                racer.held[event_id] = "E"
            elif letter in ("D", "X"):
                racer.held.pop(event_id, None)
                if letter == "D":
                    self.done.add(event_id)
                    self.done_by_slot.setdefault(racer.slot, set()).add(event_id)
            elif letter in ("L", "W") and detail:
                self.events[f"{letter}-{detail[0]}"] += 1

    def kill_one(self) -> bool:
        alive = [r for r in self.racers if r.ready.is_set() and r.popen.poll() is None]
        if not alive:
            return False
        victim = self.rng.choice(alive)
        aimed = self.rng.random() < 0.5
        if aimed:  # wait for a holder between its effect and its completion
            until = time.monotonic() + 1.5
            while time.monotonic() < until and "E" not in victim.held.values():
                time.sleep(0.005)
        with self.lock:
            os.kill(victim.popen.pid, signal.SIGKILL)
            held = dict(victim.held)
        victim.popen.wait(10)
        self.kills.append(
            Kill(victim.seed, len(held), sum(1 for v in held.values() if v == "E"), aimed)
        )
        self.racers.remove(victim)
        self.start(victim.slot)
        return True

    def pause_one(self) -> bool:
        """SIGSTOP a racer for 1.3-2 s, past its leases (a stop-the-world pause), then
        SIGCONT: the claims it holds are taken over meanwhile by racers waiting on them, and
        its fence, complete or release finds itself stale when it runs on."""
        alive = [r for r in self.racers if r.ready.is_set() and r.popen.poll() is None]
        if not alive:
            return False
        victim = self.rng.choice(alive)
        pause = self.rng.uniform(1.3, 2.0)
        with self.lock:
            os.kill(victim.popen.pid, signal.SIGSTOP)
            held = dict(victim.held)
        time.sleep(pause)
        os.kill(victim.popen.pid, signal.SIGCONT)
        self.pauses.append(
            Kill(victim.seed, len(held), sum(v == "E" for v in held.values()), False)
        )
        return True

    def run(self, kills: int, pauses: int, all_ids: int, timeout: float) -> float:
        began = time.monotonic()
        for slot in range(self.slots):
            self.start(slot)
        actions = ["kill"] * kills + ["pause"] * pauses
        self.rng.shuffle(actions)
        while actions:  # an action is used up when done (a racer ready to take it)
            time.sleep(self.rng.uniform(0.1, 0.5))
            if len(self.done) >= all_ids or all(r.popen.poll() is not None for r in self.racers):
                break
            if (self.kill_one if actions[-1] == "kill" else self.pause_one)():
                actions.pop()
        for racer in self.racers:
            left = max(1.0, timeout - (time.monotonic() - began))
            try:
                racer.popen.wait(left)
            except subprocess.TimeoutExpired:
                racer.popen.kill()
                pytest.fail(f"seed {self.seed}: a racer ran past {timeout} s: {self.tail(racer)}")
            assert racer.reader is not None
            racer.reader.join(10)
            assert racer.popen.returncode == 0, f"seed {self.seed}: {self.tail(racer)}"
        return time.monotonic() - began

    def close(self) -> None:
        """Kill the racers still running (a failed test leaves none behind)."""
        for racer in self.racers:
            if racer.popen.poll() is None:
                racer.popen.kill()
                racer.popen.wait(10)

    @staticmethod
    def tail(racer: Racer) -> str:
        return racer.stderr.read_text()[-3000:]

    def summaries(self) -> list[dict[str, Any]]:
        return [r.summary for r in self.racers if r.summary is not None]


def make_effects_table(servers: Servers, table: str) -> None:
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        # no unique key: a second effect for an id is a second row
        conn.execute(
            f"CREATE TABLE {table}_effects (event_id text NOT NULL, pid int NOT NULL, "
            "token text NOT NULL)"
        )


def pg_outcome(servers: Servers, table: str) -> tuple[Counter[str], dict[str, tuple[str, int]]]:
    """(effects per id, (state, attempts) per id's record)."""
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        effects = Counter(
            {
                e: n
                for e, n in conn.execute(
                    f"SELECT event_id, count(*) FROM {table}_effects GROUP BY event_id"
                ).fetchall()
            }
        )
        records = {
            e: (str(s), int(a))
            for e, s, a in conn.execute(
                f"SELECT event_id, state, attempts FROM {table} WHERE processor = %s",
                (PROCESSOR,),
            ).fetchall()
        }
    return effects, records


def redis_outcome(
    servers: Servers, prefix: str, ids: int = IDS
) -> tuple[Counter[str], dict[str, tuple[str, int]]]:
    client: Any = redis.Redis.from_url(servers.redis_url)  # answers bytes
    effects = Counter(b.decode() for b in client.lrange(f"{prefix}effects", 0, -1))
    store = RedisStore(servers.redis_url, prefix=prefix)
    records: dict[str, tuple[str, int]] = {}
    for event_id in event_ids(ids):
        value = client.get(store.key(PROCESSOR, event_id))
        if value is not None:
            records[event_id] = (value[:1].decode(), 0)
    client.close()
    return effects, records


def verdict(
    seed: int,
    what: str,
    effects: Counter[str],
    records: dict[str, Any],
    figure: str,
    ids: list[str],
) -> None:
    none = [e for e in ids if effects.get(e, 0) == 0]
    more = {e: n for e, n in effects.items() if n > 1}
    stray = sorted(set(effects) - set(ids))
    assert not none and not more and not stray, (
        f"{what}, seed {seed} (DEDUPE_RACE_SEED={seed} replays the schedule): "
        f"{len(none)} ids with no effect {none[:40]}, {len(more)} with more than one "
        f"{dict(list(more.items())[:40])}, stray {stray[:10]}; {figure}"
    )
    open_ids = [e for e in ids if records.get(e, ("?", 0))[0] != "c"]
    assert not open_ids, f"{what}, seed {seed}: records not completed {open_ids[:40]}; {figure}"


STORE_ARGS = {
    "pg-joined": [
        "--batch", "3", "--rollback", "0.2", "--redeliver", "0.3", "--in-tx-repeat", "0.15",
        "--cache", "1000", "--slow", "0.02", "--not-serializable", "0.05",
    ],
    "pg-fenced": ["--slow", "0.08", "--renew", "0.25", "--not-serializable", "0.05"],
    "redis-fenced": ["--slow", "0.08", "--renew", "0.25", "--not-serializable", "0.05"],
}  # fmt: skip


@pytest.mark.parametrize("store", ["pg-joined", "pg-fenced", "redis-fenced"])
def test_racers_killed_at_random_one_effect_per_id(
    servers: Servers, table: str, prefix: str, store: str, figures: list[str], tmp_path: Path
) -> None:
    seed = race_seed()
    make_effects_table(servers, table)
    if store != "redis-fenced":
        # The schema and partitions first, as `python -m idempotent_consumer schema` makes
        # them in a deployment; racers started together on a table with none yet are
        # test_race_first_use.py's case (a library bug: a first claim fails there).
        PostgresStore(servers.dsn, table=table).create()
    cmd = [
        sys.executable, "-m", "tests.idempotency.racer", "--role", "chaos", "--store", store,
        "--dsn", servers.dsn, "--table", table, "--redis-url", servers.redis_url,
        "--prefix", prefix, "--ids", str(IDS), "--concurrency", str(CONCURRENCY),
        "--lease-ms", str(LEASE_MS), "--shared", str(SHARED), "--work-ms", "30,200",
        *STORE_ARGS[store],
    ]  # fmt: skip
    sup = Supervisor(cmd, tmp_path, seed, PROCESSES)
    try:
        elapsed = sup.run(KILLS, PAUSES, IDS, timeout=240)
    finally:
        sup.close()
    if store == "redis-fenced":
        effects, records = redis_outcome(servers, prefix)
    else:
        effects, records = pg_outcome(servers, table)
    ev = sup.events
    takeovers = sum(1 for _, a in records.values() if a > 1)
    cache_hits = sum(s.get("cache", {}).get("hits", 0) for s in sup.summaries())
    killed_holding = sum(k.held for k in sup.kills)
    killed_after_effect = sum(k.after_effect for k in sup.kills)
    figure = (
        f"chaos [{store}]: {PROCESSES} processes x {CONCURRENCY} tasks x {IDS} ids, seed {seed}, "
        f"{len(sup.kills)} kills -9 ({sup.started} racers started) of racers holding "
        f"{killed_holding} claims ({killed_after_effect} between effect and completion), "
        f"{len(sup.pauses)} pauses (SIGSTOP) of racers holding {sum(p.held for p in sup.pauses)}; "
        f"runs {ev['H']}: takeovers {ev['takeover'] or takeovers}, slow past the lease "
        f"{ev['slow-before'] + ev['slow-after']}, renewing {ev['renew']}; effects written "
        f"{ev['E']}, refused by the fence {ev['R']}, an earlier holder's found {ev['I']}; "
        f"LeaseLost on complete {ev['L-complete']}, on release {ev['L-release']}; "
        f"not serializable {ev['N']}; rolled back {ev['B']}, in-transaction repeats {ev['Q']}, "
        f"transactions given up {ev['W']}, "
        f"cache hits {cache_hits}; effects per id min {min(effects.values(), default=0)} "
        f"max {max(effects.values(), default=0)}; {elapsed:.1f} s"
    )
    figures.append(figure)
    assert ev["A"] == 0, f"seed {seed}: anomalies (a fence and the store disagreeing): {figure}"
    assert ev["garbled"] == 0, f"seed {seed}: lines the supervisor could not read: {figure}"
    verdict(seed, store, effects, records, figure, event_ids(IDS))
    # the chaos really happened
    assert len(sup.kills) >= min(KILLS, 3), figure
    assert killed_holding > 0 and killed_after_effect > 0, figure
    if store == "pg-joined":
        assert ev["B"] > 0 and ev["Q"] > 0 and ev["N"] > 0 and cache_hits > 0, figure
        # a joined claim commits completed records only: nothing is ever left to take over
        assert takeovers == 0 and ev["takeover"] == 0, figure
    else:
        assert ev["I"] > 0, figure  # a holder killed after its effect was replaced
        assert ev["R"] + ev["L-complete"] + ev["L-release"] > 0, figure  # stale holders
        assert ev["N"] > 0, figure
    if store == "pg-fenced":
        assert takeovers > 0, figure


# -- memory: tasks cancelled at random, threads, decorated functions ---------------------------


MEMORY_LEASE = timedelta(milliseconds=300)


def collision_free_seed(slots: int, ids: list[str]) -> int:
    """A slot-hash seed under which no two of the test's keys share a slot: a MemoryStore
    forgets an id whose slot another id took (its repeat runs again, by design), which
    would be no bug of the claim. Found by claiming every key once on a scratch store."""
    namespaces = [PROCESSOR] + [f"{PROCESSOR}/{__name__}.{fn}" for fn in ("charge", "refund")]
    for seed in range(1000):
        scratch = SyncIdempotency(MemoryStore(slots, seed=seed), PROCESSOR)
        for namespace in namespaces:
            idem = scratch.for_processor(namespace)
            for event_id in ids:
                with idem.claim(event_id) as claim:
                    claim.complete(None)
        if scratch.store.metrics().evictions == 0:  # type: ignore[attr-defined]
            return seed
    raise AssertionError(f"{len(ids)} ids: no seed without collisions in {slots} slots")


@dataclass
class MemoryRace:
    seed: int
    effects: Counter[tuple[str, str]] = field(default_factory=Counter)  # (kind, id) -> effects
    events: Counter[str] = field(default_factory=Counter)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def effect(self, kind: str, event_id: str, reconcile: bool) -> str:
        with self.lock:
            if reconcile and self.effects[(kind, event_id)]:
                return "I"
            self.effects[(kind, event_id)] += 1
            return "E"

    def count(self, what: str) -> None:
        with self.lock:
            self.events[what] += 1


async def test_memory_tasks_cancelled_at_random_one_effect_per_id(figures: list[str]) -> None:
    seed = race_seed()
    race = MemoryRace(seed)
    ids = event_ids(MEMORY_IDS)
    # no two keys in one slot: slots for an even chance per seed (3 namespaces x ids keys)
    slots = max(1 << 20, 1 << ((3 * len(ids)) ** 2 // 2).bit_length())
    store = MemoryStore(slots, seed=collision_free_seed(slots, ids))
    idem = Idempotency(store, PROCESSOR, lease=MEMORY_LEASE, expire_after=timedelta(hours=1))
    sidem = SyncIdempotency(store, PROCESSOR, lease=MEMORY_LEASE, expire_after=timedelta(hours=1))
    loop_held: dict[asyncio.Task[Any], dict[str, str]] = {}

    def timing(rng: random.Random) -> tuple[float, float, str]:
        before, after, kind = rng.uniform(0.002, 0.02), rng.uniform(0.002, 0.02), "-"
        if rng.random() < 0.1:
            slow = rng.uniform(0.4, 0.7)
            kind = rng.choice(["slow-before", "slow-after"])
            before, after = (slow, after) if kind == "slow-before" else (before, slow)
        return before, after, kind

    async def run_once(event_id: str, rng: random.Random, held: dict[str, str]) -> bool:
        before, after, kind = timing(rng)
        finished = False
        try:
            async with idem.claim(event_id, payload=event_id, wait=True) as claim:
                if claim.done:
                    return True
                held[event_id] = "H"
                race.count("H")
                if claim.taken_over:
                    race.count("takeover")
                race.count(kind)
                await asyncio.sleep(before)
                try:
                    await claim.extend()  # the fence: LeaseLost once taken over ...
                except LeaseLost:
                    race.count("R")
                    raise
                # ... and no await until the effect: nothing else runs in between
                race.count(race.effect("claim", event_id, claim.taken_over))
                held[event_id] = "E"
                await asyncio.sleep(after)
                finished = True
                claim.complete(Decimal("1.5") if rng.random() < 0.05 else "ok")
        except LeaseLost:
            race.count("L-complete" if finished else "L-release")
            return False
        except NotSerializable:
            race.count("N")
        finally:
            held.pop(event_id, None)
        return True

    def decorated(name: str) -> Callable[[str, random.Random], Any]:
        async def effect(event_id: str, rng: random.Random) -> object:
            await asyncio.sleep(rng.uniform(0.002, 0.03))  # cancelled here: no effect
            race.effect(name, event_id, False)
            # no await from the effect to the completion: a cancellation cannot fall between
            return Decimal("2.5") if rng.random() < 0.05 else name

        effect.__qualname__ = name
        return idempotent_function(idem, key="event_id")(effect)

    charge, refund = decorated("charge"), decorated("refund")

    async def racer(number: int) -> None:
        rng = random.Random(seed * 1000 + number)
        order = ids[:]
        rng.shuffle(order)
        queue = list(reversed(order))
        held = loop_held.setdefault(asyncio.current_task(), {})  # type: ignore[arg-type]

        async def worker() -> None:
            while queue:
                event_id = queue.pop()
                if not await run_once(event_id, rng, held):
                    queue.insert(0, event_id)
                    continue
                for fn in (charge, refund):
                    try:
                        await fn(event_id, rng)
                    except NotSerializable:
                        race.count("N")

        await asyncio.gather(*(worker() for _ in range(3)))

    def thread_racer(number: int, stop: threading.Event) -> None:
        rng = random.Random(seed * 1000 + 900 + number)
        order = ids[:]
        rng.shuffle(order)
        pending = list(reversed(order))
        while pending and not stop.is_set():
            event_id = pending.pop()
            before, after, kind = timing(rng)
            finished = False
            try:
                with sidem.claim(event_id, payload=event_id, wait=True) as claim:
                    if claim.done:
                        continue
                    race.count("H")
                    race.count("thread")
                    if claim.taken_over:
                        race.count("takeover")
                    race.count(kind)
                    time.sleep(before)
                    with race.lock:  # the fence and the effect in one step
                        try:
                            claim.extend()
                        except LeaseLost:
                            race.count("R")
                            raise
                        race.count(race.effect("claim", event_id, claim.taken_over))
                    time.sleep(after)
                    finished = True
                    claim.complete("ok")
            except LeaseLost:
                race.count("L-complete" if finished else "L-release")
                pending.insert(0, event_id)

    began = time.monotonic()
    stop = threading.Event()
    threads = [threading.Thread(target=thread_racer, args=(n, stop)) for n in range(2)]
    for thread in threads:
        thread.start()
    rng = random.Random(seed)
    started = 0
    tasks: list[asyncio.Task[None]] = []
    for _ in range(TASKS):
        started += 1
        tasks.append(asyncio.create_task(racer(started)))
    cancels: list[tuple[int, int]] = []  # (held, after effect) per cancellation
    try:
        while len(cancels) < KILLS_MEMORY:
            await asyncio.sleep(rng.uniform(0.0, 0.1))
            alive = [t for t in tasks if not t.done()]
            if not alive:
                break
            victim = rng.choice(alive)
            held = loop_held.get(victim, {})
            cancels.append((len(held), sum(1 for v in held.values() if v == "E")))
            victim.cancel()
            tasks.remove(victim)
            started += 1
            tasks.append(asyncio.create_task(racer(started)))
        await asyncio.wait_for(asyncio.gather(*tasks), 120)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        for thread in threads:
            await asyncio.to_thread(thread.join, 60)
    elapsed = time.monotonic() - began
    # every id done in every namespace: a last pass finds repeats only, no effect runs
    before = Counter(race.effects)
    open_ids = []
    for event_id in ids:
        async with idem.claim(event_id, payload=event_id) as claim:
            if not claim.done:
                open_ids.append(event_id)
        for fn in (charge, refund):
            await fn(event_id, random.Random(0))
    assert not open_ids, f"seed {seed}: not completed: {open_ids[:40]}"
    assert race.effects == before, f"seed {seed}: a repeat ran its effect again"

    ev = race.events
    metrics = store.metrics()
    decorated_ids = Counter(kind for kind, _ in race.effects)
    figure = (
        f"chaos [memory]: {TASKS} racer tasks x 3 + 2 threads x {len(ids)} ids, seed {seed}, "
        f"{len(cancels)} cancellations ({started} racers started) of racers holding "
        f"{sum(h for h, _ in cancels)} claims ({sum(e for _, e in cancels)} between effect and "
        f"completion); runs {ev['H']} ({ev['thread']} in threads): takeovers {ev['takeover']}, "
        f"slow past the lease {ev['slow-before'] + ev['slow-after']}; effects written "
        f"{ev['E']}, refused by the fence {ev['R']}, an earlier holder's found {ev['I']}; "
        f"LeaseLost on complete {ev['L-complete']}, on release {ev['L-release']}; "
        f"not serializable {ev['N']}; decorated charge {decorated_ids['charge']} ids, "
        f"refund {decorated_ids['refund']} ids; {elapsed:.1f} s"
    )
    figures.append(figure)
    assert metrics.evictions == 0, f"two ids shared a slot: {metrics}"
    for kind in ("claim", "charge", "refund"):
        per_id = Counter({e: race.effects.get((kind, e), 0) for e in ids})
        verdict(seed, f"memory {kind}", per_id, dict.fromkeys(ids, ("c", 0)), figure, ids)
    assert len(cancels) >= KILLS_MEMORY // 2, figure
    assert sum(h for h, _ in cancels) > 0 and sum(e for _, e in cancels) > 0, figure
    assert ev["takeover"] > 0 and ev["I"] > 0, figure
    assert ev["R"] + ev["L-complete"] + ev["L-release"] > 0, figure  # stale holders
