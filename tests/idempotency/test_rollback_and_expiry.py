"""Effects lost to a rollback or doubled by an early expiry, on the real PostgreSQL.

* A cached repeat after a rollback: inside the caller's transaction T a joined claim of X
  completes; a second claim of X in T (a repeat in the same batch) reads T's own uncommitted
  row as completed. A ``LocalCache`` that remembered that answer would tell the redelivery
  after T's rollback "done": the handler skipped, the offset committed, the charge never made.
  Only a completion read outside any caller's transaction is final enough to cache.
* An ``expire_after`` shorter than the lease: the claim that found an expired record deleted
  it whatever its state, so a live holder's claim went and a second holder ran the effect.
  ``Idempotency`` now refuses ``expire_after < lease``; a claim only drops an expired record
  that is completed or whose lease ended; and ``extend()`` keeps the record at least until its
  new lease ends.
"""

from __future__ import annotations

import time
from datetime import timedelta

import psycopg
import pytest
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    LocalCache,
    PostgresStore,
    SyncIdempotency,
)

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency


async def test_a_repeat_inside_a_rolled_back_transaction_is_not_cached(
    servers: Servers, table: str
) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    cache = LocalCache(store)
    idem = Idempotency(cache, "billing")
    async with store.connection() as conn:
        with pytest.raises(RuntimeError):
            async with conn.transaction():  # the caller's batch: both copies of x1 in it
                async with idem.claim("x1", connection=conn) as first:
                    assert not first.done
                    first.complete("ch_1")
                async with idem.claim("x1", connection=conn) as repeat:
                    assert repeat.done  # T's own row, not committed
                raise RuntimeError("the batch fails: T rolls back")
    assert cache.size == 0
    charges: list[str] = []
    async with idem.claim("x1") as redelivery:  # the batch again
        assert not redelivery.done, "answered from a cache of a rolled-back completion"
        charges.append("x1")
        redelivery.complete("ch_2")
    assert charges == ["x1"]
    await store.close()


def test_a_repeat_inside_a_rolled_back_transaction_is_not_cached_sync(
    servers: Servers, table: str
) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    cache = LocalCache(store)
    idem = SyncIdempotency(cache, "billing")
    with store.connection_sync() as conn, pytest.raises(RuntimeError), conn.transaction():
        with idem.claim("x2", connection=conn) as first:
            first.complete("ch_1")
        with idem.claim("x2", connection=conn) as repeat:
            assert repeat.done
        raise RuntimeError("rollback")
    with idem.claim("x2") as redelivery:
        assert not redelivery.done
        redelivery.complete("ch_2")
    store.close_sync()


def test_expire_after_shorter_than_the_lease_is_refused(servers: Servers, table: str) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    with pytest.raises(ValueError, match="expire_after=0:00:01 is shorter than the lease"):
        SyncIdempotency(
            store, "billing", lease=timedelta(seconds=30), expire_after=timedelta(seconds=1)
        )
    store.close_sync()


def test_a_live_claim_past_its_expiry_is_not_taken(servers: Servers, table: str) -> None:
    """A holder that extends its lease past ``expire_after`` keeps its record (extend moves
    ``expires_at`` too), and a claim that finds the record past its first expiry still sees
    the live holder: one effect."""
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    idem = SyncIdempotency(
        store, "billing", lease=timedelta(seconds=1), expire_after=timedelta(seconds=1)
    )
    effects: list[str] = []
    with idem.claim("x3") as holder:
        effects.append("holder")
        holder.extend(timedelta(seconds=30))  # a long handler keeps its claim
        with psycopg.connect(servers.dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT lease_until, expires_at FROM {table} WHERE event_id = 'x3'"
            ).fetchone()
        assert row is not None and row[1] >= row[0], "the record expires before its claim"
        time.sleep(1.3)  # past the first expiry and the first lease
        with pytest.raises(AlreadyInProgress), idem.claim("x3"):
            effects.append("second holder")
        holder.complete("done")
    assert effects == ["holder"]
    store.close_sync()


def test_a_live_claim_past_its_expiry_is_not_taken_even_unextended_in_the_row(
    servers: Servers, table: str
) -> None:
    """Records written before extend kept ``expires_at`` (an upgraded table) can hold a live
    claim past their expiry: the claim's own check keeps the holder."""
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    idem = SyncIdempotency(
        store, "billing", lease=timedelta(seconds=1), expire_after=timedelta(seconds=1)
    )
    effects: list[str] = []
    with idem.claim("x4") as holder:
        effects.append("holder")
        with psycopg.connect(servers.dsn, autocommit=True) as conn:  # as 1.0 left it
            conn.execute(
                f"UPDATE {table} SET lease_until = clock_timestamp() + interval '30 seconds',"
                " expires_at = clock_timestamp() WHERE event_id = 'x4'"
            )
        time.sleep(0.2)
        with pytest.raises(AlreadyInProgress), idem.claim("x4"):
            effects.append("second holder")
        holder.complete("done")
    assert effects == ["holder"]
    store.close_sync()
