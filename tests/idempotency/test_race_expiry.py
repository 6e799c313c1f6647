"""A holder killed after its effect, redelivered once its record's ``expire_after`` has passed:
the redelivery must still be told it takes over from that holder (``attempts`` 2,
``taken_over``), or a handler that looks for the earlier effect only then runs it twice.

A racer (``racer.py``, role ``chaos``, store ``pg-fenced``) claims 20 ids, writes each effect
(fenced by ``claim.token``) and sleeps before completing; it is killed with SIGKILL. A
second racer then runs the 20 ids, as the chaos harness's racers do: a claim that took the
event over looks for the effect of the holder it replaced and writes none if it is there; a
first claim (``attempts`` 1) writes it. One effect per id is the expected end.

A library bug this test found (PostgreSQL and memory; fixed in e95dba7, "a claim still in
progress past its expire_after is taken over"): the claim deleted a record past
``expires_at`` whose lease had ended whatever its state (``<table>_claim``: ``IF v_found
AND r.expires_at <= v_now AND (r.state = 'c' OR r.lease_until <= v_now) THEN DELETE``;
``MemoryStore.claim_sync`` overwrote the slot) and inserted a new claim with ``attempts`` 1.
A crashed holder's in-progress record vanished without a trace once ``expire_after`` had
passed since its first claim: the redelivery was a "first claim" although the crashed
holder may have done its effect. With ``expire_after == lease``, which ``Idempotency``
allows, that was every takeover after a crash; with a longer ``expire_after``, every
redelivery later than it. Only a *completed* expired record is a repeat that may run again.
Redis keeps no count at all (``attempts`` None: every holder must look).

Rows: ``expire_after`` 3 s, redelivered at once (a takeover: the control);
``expire_after`` equal to the 1 s lease (before the fix: 2 effects per id);
``expire_after`` 3 s, redelivered 3.5 s after the claims (before the fix: 2 effects per id);
Redis with ``expire_after`` equal to the lease.
The same on memory, in-process, with a cancelled task as the crash (``expire_after`` equal
to the lease; before the fix: 2 effects per id). About 12-14 s in all.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from idempotent_consumer import Idempotency, MemoryStore

from tests.idempotency.conftest import Servers
from tests.idempotency.racer import event_ids
from tests.idempotency.test_race_chaos import (
    Supervisor,
    make_effects_table,
    pg_outcome,
    redis_outcome,
)

pytestmark = pytest.mark.idempotency

HELD = 20
LEASE_MS = 1000


def racer_cmd(
    servers: Servers, store: str, table: str, prefix: str, expire_ms: int, *extra: str
) -> list[str]:
    return [
        sys.executable, "-m", "tests.idempotency.racer", "--role", "chaos", "--store", store,
        "--dsn", servers.dsn, "--table", table, "--redis-url", servers.redis_url,
        "--prefix", prefix, "--ids", str(HELD), "--concurrency", str(HELD),
        "--lease-ms", str(LEASE_MS), "--expire-ms", str(expire_ms), *extra,
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("store", "expire_ms", "redeliver_after_s"),
    [
        ("pg-fenced", 3000, 0.0),  # a takeover within expire_after: the control
        ("pg-fenced", LEASE_MS, 0.0),  # expire_after == lease: every takeover forgotten
        ("pg-fenced", 3000, 3.5),  # redelivered after expire_after
        ("redis-fenced", LEASE_MS, 0.0),  # no attempts on Redis: every holder looks
    ],
)
def test_a_holder_killed_after_its_effect_is_taken_over_after_expire_after(
    servers: Servers,
    table: str,
    prefix: str,
    store: str,
    expire_ms: int,
    redeliver_after_s: float,
    figures: list[str],
    tmp_path: Path,
) -> None:
    make_effects_table(servers, table)
    # every run sleeps a minute after its effect, before completing: killed there
    slow = ["--slow", "1", "--slow-phase", "after", "--slow-ms", "60000,60000"]
    holding = Supervisor(
        [*racer_cmd(servers, store, table, prefix, expire_ms), *slow],
        tmp_path,
        seed=1,
        slots=1,
    )
    try:
        holder = holding.start(0)
        deadline = time.monotonic() + 60
        while holding.events["E"] < HELD and time.monotonic() < deadline:
            assert holder.popen.poll() is None, holding.tail(holder)
            time.sleep(0.01)
        assert holding.events["E"] == HELD, holding.tail(holder)
        claimed_at = time.monotonic()
        os.kill(holder.popen.pid, signal.SIGKILL)
        holder.popen.wait(10)
    finally:
        holding.close()
    time.sleep(redeliver_after_s)

    rescuing = Supervisor(
        racer_cmd(servers, store, table, prefix, expire_ms), tmp_path / "rescue", seed=2, slots=1
    )
    (tmp_path / "rescue").mkdir()
    rescuer = rescuing.start(0)
    try:
        rescuer.popen.wait(60)
    finally:
        rescuing.close()
    assert rescuer.popen.returncode == 0, rescuing.tail(rescuer)
    assert rescuer.reader is not None
    rescuer.reader.join(10)
    redelivered = time.monotonic() - claimed_at
    if store == "redis-fenced":
        effects, records = redis_outcome(servers, prefix, HELD)
    else:
        effects, records = pg_outcome(servers, table)
    ids = event_ids(HELD)
    ev = rescuing.events
    figure = (
        f"expiry [{store}]: lease {LEASE_MS} ms, expire_after {expire_ms} ms; {HELD} holders "
        f"killed after their effect, redelivered {redelivered:.1f} s after: takeovers "
        f"{ev['takeover']}, first claims {ev['H'] - ev['takeover']}, an earlier holder's "
        f"effect found {ev['I']}, effects written {ev['E']}; effects per id "
        f"{sorted(Counter(effects[e] for e in ids).items())}"
    )
    figures.append(figure)
    assert all(records[e][0] == "c" for e in ids), figure
    assert {e: effects[e] for e in ids} == dict.fromkeys(ids, 1), (
        "a redelivery after expire_after was a first claim (attempts 1), not a takeover: "
        f"the killed holder's effect ran again; {figure}"
    )
    if store == "pg-fenced":
        assert ev["takeover"] == HELD, figure


async def test_a_task_cancelled_after_its_effect_is_taken_over_after_expire_after_memory(
    figures: list[str],
) -> None:
    lease = timedelta(milliseconds=300)
    idem = Idempotency(MemoryStore(1 << 16), "race", lease=lease, expire_after=lease)
    effects: Counter[str] = Counter()
    ids = event_ids(HELD)

    async def crashing(event_id: str) -> None:
        async with idem.claim(event_id) as claim:
            effects[event_id] += 1
            await asyncio.sleep(60)  # cancelled here: after the effect, before completing
            claim.complete("never")

    holders = [asyncio.create_task(crashing(e)) for e in ids]
    await asyncio.sleep(0.05)
    for task in holders:
        task.cancel()
    await asyncio.gather(*holders, return_exceptions=True)
    await asyncio.sleep(lease.total_seconds() + 0.1)
    attempts: Counter[int | None] = Counter()
    for event_id in ids:
        async with idem.claim(event_id, wait=True) as claim:
            attempts[claim.attempts] += 1
            if not claim.taken_over or not effects[event_id]:  # a first claim: no effect yet
                effects[event_id] += 1
            claim.complete("ok")
    figure = (
        f"expiry [memory]: lease = expire_after = 300 ms; {HELD} holders cancelled after "
        f"their effect, redelivered: attempts {dict(attempts)}, effects per id "
        f"{sorted(Counter(effects.values()).items())}"
    )
    figures.append(figure)
    assert effects == Counter(dict.fromkeys(ids, 1)), (
        "a redelivery after expire_after was a first claim (attempts 1), not a takeover: "
        f"the cancelled holder's effect ran again; {figure}"
    )
