"""A claim joined to a transaction that waits (``wait=True`` or a ``timedelta``) for another
transaction's claim of the same id waits at most the lease (or the ``wait=`` value), then
raises ``AlreadyInProgress``; its own transaction and ``lock_timeout`` survive.

Two connections on the real PostgreSQL: one holds the claim in a transaction left open, the
other waits for it. A waiter still blocked after ten leases has no bound: the test fails and
then lets the holder go, so the waiter's thread ends either way.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from idempotent_consumer import AlreadyInProgress, Idempotency, PostgresStore, SyncIdempotency

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=500)
GUARD = LEASE.total_seconds() * 10  # a waiter blocked this long has no bound


@pytest.fixture
def store(servers: Servers, table: str) -> Iterator[PostgresStore]:
    s = PostgresStore(servers.dsn, table=table, max_size=4)
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_effects (event_id text NOT NULL)")
    yield s
    s.close_sync()


def hold(store: PostgresStore, idem: SyncIdempotency, event_id: str) -> tuple[Any, Any]:
    """A thread holding a joined claim of ``event_id`` in an open transaction until told."""
    inside, finish = threading.Event(), threading.Event()

    def holder() -> None:
        with store.connection_sync() as conn, idem.claim(event_id, connection=conn) as claim:
            inside.set()
            finish.wait(60)
            claim.complete("first")

    thread = threading.Thread(target=holder)
    thread.start()
    assert inside.wait(10)
    return thread, finish


@pytest.mark.parametrize("wait", [True, LEASE], ids=["wait=True", "wait=lease"])
def test_a_joined_waiter_is_bounded_and_its_transaction_survives(
    servers: Servers, table: str, store: PostgresStore, wait: bool | timedelta
) -> None:
    idem = SyncIdempotency(store, "billing", lease=LEASE)
    holder, finish = hold(store, idem, "e6")
    outcome: list[object] = []

    def waiter() -> None:
        with store.connection_sync() as conn:
            try:
                with conn.transaction():
                    conn.execute("SET LOCAL lock_timeout = '7s'")
                    conn.execute(f"INSERT INTO {table}_effects VALUES ('before')")
                    try:
                        with idem.claim("e6", connection=conn, wait=wait):
                            outcome.append("ran")
                    except AlreadyInProgress as exc:
                        outcome.append(exc)
                    row = conn.execute("SHOW lock_timeout").fetchone()
                    outcome.append(row[0] if row else None)
            except Exception as exc:  # the transaction did not survive
                outcome.append(exc)

    thread = threading.Thread(target=waiter)
    thread.start()
    thread.join(GUARD)
    bounded = not thread.is_alive()
    finish.set()
    holder.join(10)
    thread.join(10)
    assert bounded, "the joined waiter was still blocked after ten leases"
    assert len(outcome) == 2, outcome
    busy, lock_timeout = outcome
    assert isinstance(busy, AlreadyInProgress) and busy.retry_after
    assert lock_timeout == "7s"  # the caller's setting is put back
    with psycopg.connect(servers.dsn) as conn:  # the caller's transaction committed
        rows = conn.execute(f"SELECT event_id FROM {table}_effects").fetchall()
    assert rows == [("before",)]
    with store.connection_sync() as conn, idem.claim("e6", connection=conn) as claim:
        assert claim.done and claim.result == "first"


async def test_an_async_joined_waiter_is_bounded(store: PostgresStore) -> None:
    sync_idem = SyncIdempotency(store, "billing", lease=LEASE)
    holder, finish = hold(store, sync_idem, "e7")
    idem = Idempotency(store, "billing", lease=LEASE)
    try:
        async with store.connection() as conn:
            with pytest.raises(AlreadyInProgress):
                async with asyncio.timeout(GUARD):
                    async with idem.claim("e7", connection=conn, wait=True):
                        pytest.fail("must not run")
    finally:
        finish.set()
        await asyncio.to_thread(holder.join, 10)
    await store.close()
