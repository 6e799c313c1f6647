"""PostgreSQL: a takeover against the old holder's late complete or release, the 64-bit lock
key, and a joined claim when the current period has no partition.

The takeover races are driven, not left to chance: the old holder's complete (or release)
runs in a transaction the test keeps open (``connection=`` puts the store's own statement in
it), so it is exactly "in flight" while a second process claims the expired id; the test
then commits it. Before the fix the takeover read the in-progress row, waited on the row
lock, and took the row over after the complete committed (the effect ran twice) or after the
release deleted it (the new holder ran with no row behind it, and a third claimer acquired
the id too). Each test runs ``ROUNDS`` rounds, each with a separate claimer process, and
counts the rounds that went wrong.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

import psycopg
import pytest
from idempotent_consumer import AlreadyInProgress, PostgresStore, SyncIdempotency
from idempotent_consumer._base import ClaimRequest, Held, Outcome, new_token

from tests.idempotency.conftest import Servers
from tests.support import ROOT

pytestmark = pytest.mark.idempotency

ROUNDS = 5
LEASE = timedelta(milliseconds=200)
EXPIRE = timedelta(days=1)

# A claimer process: claims the id (waiting up to 5 s), runs its "effect" (a row), holds the
# claim for --hold seconds, completes, and prints what happened as JSON.
CLAIMER = """
import json, sys, time
from datetime import timedelta
import psycopg
from idempotent_consumer import PostgresStore, SyncIdempotency, LeaseLost
dsn, table, event_id, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
store = PostgresStore(dsn, table=table, max_size=2)
idem = SyncIdempotency(store, "race", lease=timedelta(seconds=30))
out = {"ran": False, "done": False, "lease_lost": False}
print("CLAIMING", flush=True)
try:
    with idem.claim(event_id, wait=timedelta(seconds=5)) as claim:
        out["done"] = claim.done
        if not claim.done:
            out["ran"] = True
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute(f"INSERT INTO {table}_effects VALUES (%s)", (event_id,))
            print("RUNNING", flush=True)
            time.sleep(hold)
            claim.complete("second")
except LeaseLost:
    out["lease_lost"] = True
print(json.dumps(out), flush=True)
store.close_sync()
"""


def claimer(servers: Servers, table: str, event_id: str, hold: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", CLAIMER, servers.dsn, table, event_id, str(hold)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def effects(servers: Servers, table: str, event_id: str) -> int:
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        row = conn.execute(
            f"SELECT count(*) FROM {table}_effects WHERE event_id = %s", (event_id,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def held_expired(store: PostgresStore, event_id: str) -> Held:
    """The old holder: claimed, ran its effect, and its lease has ended."""
    request = ClaimRequest("race", event_id, None, new_token(), LEASE, EXPIRE, None)
    reply = store.claim_sync(request)
    assert reply.outcome is Outcome.ACQUIRED
    time.sleep(LEASE.total_seconds() + 0.1)
    return Held("race", event_id, request.token, None, reply.locator)


def wait_claiming(proc: subprocess.Popen[str]) -> None:
    """Until the claimer is past its imports and claiming, then half a second more: its
    claim reaches the in-flight row (or the lock) well before the test commits."""
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "CLAIMING", proc.stderr.read() if proc.stderr else line
    time.sleep(0.5)


@pytest.fixture
def pg(servers: Servers, table: str) -> PostgresStore:
    store = PostgresStore(servers.dsn, table=table, max_size=2)
    store.create()
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_effects (event_id text NOT NULL)")
    return store


def test_takeover_against_a_late_complete(
    servers: Servers, table: str, pg: PostgresStore, figures: list[str]
) -> None:
    twice = 0
    for n in range(ROUNDS):
        event_id = f"late-complete-{n}"
        held = held_expired(pg, event_id)
        # the old holder's complete, in flight until the transaction commits
        with psycopg.connect(servers.dsn, autocommit=True) as late, late.transaction():
            assert pg.complete_sync(held, b'"first"', EXPIRE, connection=late)
            proc = claimer(servers, table, event_id, 0.0)
            wait_claiming(proc)
        # committed: the complete lands while the claimer is mid-claim
        out, err = proc.communicate(timeout=30)
        result = json.loads(out.strip().splitlines()[-1]) if out.strip() else err[-2000:]
        if effects(servers, table, event_id) != 0 or not result.get("done"):
            twice += 1
    pg.close_sync()
    figures.append(f"pg takeover vs late complete: effect ran again in {twice}/{ROUNDS} rounds")
    assert twice == 0, f"the effect ran a second time in {twice} of {ROUNDS} rounds"


def test_takeover_against_a_late_release(
    servers: Servers, table: str, pg: PostgresStore, figures: list[str]
) -> None:
    idem = SyncIdempotency(pg, "race", lease=timedelta(seconds=30))
    two_holders = 0
    for n in range(ROUNDS):
        event_id = f"late-release-{n}"
        held = held_expired(pg, event_id)
        with psycopg.connect(servers.dsn, autocommit=True) as late, late.transaction():
            assert pg.release_sync(held, connection=late)
            proc = claimer(servers, table, event_id, 3.0)  # holds its claim 3 s
            wait_claiming(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "RUNNING", proc.stderr and proc.stderr.read()
        # The claimer runs its body now; nobody else may hold the id meanwhile.
        try:
            with idem.claim(event_id) as third:
                third.complete("third")
            two_holders += 1
        except AlreadyInProgress:
            pass
        out, err = proc.communicate(timeout=30)
        assert json.loads(out.strip().splitlines()[-1])["ran"], err[-2000:]
    pg.close_sync()
    figures.append(
        f"pg takeover vs late release: a second live holder in {two_holders}/{ROUNDS} rounds"
    )
    assert two_holders == 0, f"two holders of one id in {two_holders} of {ROUNDS} rounds"


def colliding_ids(servers: Servers, processor: str) -> tuple[str, str]:
    """Two event ids whose 32-bit ``hashtext`` of (processor, id) collide (300,000 ids give
    about ten such pairs)."""
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        row = conn.execute(
            """
            SELECT (array_agg(id))[1], (array_agg(id))[2] FROM (
                SELECT 'evt-' || i AS id, hashtext(%s || chr(31) || 'evt-' || i) AS h
                  FROM generate_series(1, 300000) AS i) AS s
             GROUP BY h HAVING count(*) > 1 LIMIT 1
            """,
            (processor,),
        ).fetchone()
    assert row is not None, "no 32-bit collision among 300,000 ids"
    return str(row[0]), str(row[1])


def test_ids_with_colliding_32_bit_hashes_are_not_busy(
    servers: Servers, table: str, pg: PostgresStore
) -> None:
    a, b = colliding_ids(servers, "race")
    idem = SyncIdempotency(pg, "race")
    # a's claim holds its lock until the commit; b is another id, never "in progress"
    with pg.connection_sync() as conn, conn.transaction(), idem.claim(a, connection=conn) as first:
        assert not first.done
        with idem.claim(b) as second:
            assert not second.done
            second.complete("b")
        first.complete("a")
    pg.close_sync()


def test_joined_claim_creates_a_missing_partition(
    servers: Servers, table: str, pg: PostgresStore
) -> None:
    idem = SyncIdempotency(pg, "billing")
    with pg.connection_sync() as conn:
        conn.execute(f"CREATE TABLE {table}_charges (event_id text)")
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        for name, _, _ in pg.partitions():
            conn.execute(f"ALTER TABLE {table} DETACH PARTITION {name}")
            conn.execute(f"DROP TABLE {name}")
    assert pg.partitions() == []
    with pg.connection_sync() as conn, conn.transaction():
        conn.execute(f"INSERT INTO {table}_charges VALUES ('before')")  # the caller's own work
        with idem.claim("evt-1", connection=conn) as claim:
            assert not claim.done
            conn.execute(f"INSERT INTO {table}_charges VALUES ('evt-1')")
            claim.complete("ch_1")
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT event_id FROM {table}_charges ORDER BY 1").fetchall()
        state = conn.execute(f"SELECT state FROM {table} WHERE event_id = 'evt-1'").fetchone()
    assert rows == [("before",), ("evt-1",)]
    assert state == ("c",)
    assert pg.partitions() != []
    pg.close_sync()
