"""Consumers started together on a new table: a store whose first use finds another process
maintaining the partitions must wait for them, not fail its first claims.

Found by the race harness (``test_race_chaos.py``: four racers started at once on a fresh
table; now and then one died at its first claim). Library bug (PostgreSQL): the maintainer
lock ``(lock_namespace, 0)`` is held by whichever process is creating the schema or the
partitions; ``Partitions.maintain`` (``_pg_partitions.py``) only tries it
(``pg_try_advisory_lock``) and, held, skips. So a store whose first use (``_first_use``)
comes while another process holds it has no partition for now: its first claim answers
``no_partition``, ``maintain_quietly`` tries once (skipped again if the other still
maintains) and sets the next attempt ``retry_interval`` ahead (60 s with the default one-day
period), and the claim's second try raises ``RuntimeError: ... no partition for now, and
maintenance made none``. Every claim of that store fails the same way until the interval
has passed, although the other process made the partitions a moment later. Without a
partition for now no claim can succeed, so a store that has none should wait (bounded) for
the maintainer lock, or read the partitions again once the maintainer is done, instead.

Here the other process is a connection of the test holding the maintainer lock for a
second (as a maintainer creating partitions does), then making the partitions; the store
under test (``create_schema=False``: the schema exists) claims meanwhile. Failed with the
``RuntimeError``, async and sync, until a claim that finds no partition waited (bounded) for
the maintainer lock (``Partitions.ensure_current``). About 1.5 s each.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
import pytest
from idempotent_consumer import Idempotency, PostgresStore, SyncIdempotency

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency

HELD_S = 1.0  # how long the other process maintains


@contextmanager
def another_process_maintaining(servers: Servers, table: str) -> Iterator[None]:
    """The schema without partitions, and the maintainer lock held by another connection
    for ``HELD_S``, after which that "process" makes the partitions and lets go."""
    maker = PostgresStore(servers.dsn, table=table)
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(maker.schema_sql().encode())  # the table and functions, no partition
    other = psycopg.connect(servers.dsn, autocommit=True)
    other.execute("SELECT pg_advisory_lock(%s, 0)", (maker.lock_namespace,))

    def maintain() -> None:
        time.sleep(HELD_S)
        other.execute("SELECT pg_advisory_unlock(%s, 0)", (maker.lock_namespace,))
        maker.maintain()  # creates the partitions (if the store under test did not)
        other.close()

    thread = threading.Thread(target=maintain)
    thread.start()
    try:
        yield
    finally:
        thread.join(30)
        maker.close_sync()


async def test_a_store_starting_while_another_process_maintains_claims(
    servers: Servers, table: str
) -> None:
    with another_process_maintaining(servers, table):
        store = PostgresStore(servers.dsn, table=table, create_schema=False, max_size=2)
        idem = Idempotency(store, "billing")
        started = time.monotonic()
        try:
            async with idem.claim("first") as claim:
                assert not claim.done
                claim.complete("ch_1")
            async with idem.claim("first") as repeat:
                assert repeat.done and repeat.result == "ch_1"
        finally:
            await store.close()
        # answered once the other process was done, not failed at once
        assert time.monotonic() - started < HELD_S + 10


def test_a_store_starting_while_another_process_maintains_claims_sync(
    servers: Servers, table: str
) -> None:
    with another_process_maintaining(servers, table):
        store = PostgresStore(servers.dsn, table=table, create_schema=False, max_size=2)
        idem = SyncIdempotency(store, "billing")
        try:
            with idem.claim("first") as claim:
                assert not claim.done
                claim.complete("ch_1")
            with idem.claim("first") as repeat:
                assert repeat.done and repeat.result == "ch_1"
        finally:
            store.close_sync()
