"""A claim joined to the caller's PostgreSQL transaction: it commits and rolls back with the
effect, a concurrent claim sees the other transaction (busy, or waits for its outcome), and
isolation levels other than READ COMMITTED are refused."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from idempotent_consumer import AlreadyInProgress, PostgresStore, SyncIdempotency

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency


@pytest.fixture
def joined(servers: Servers, table: str) -> Iterator[tuple[SyncIdempotency, PostgresStore]]:
    store = PostgresStore(servers.dsn, table=table, max_size=4)
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table}_effects (event_id text NOT NULL)")
    yield SyncIdempotency(store, "billing"), store
    store.close_sync()


def effects(servers: Servers, table: str) -> list[str]:
    with psycopg.connect(servers.dsn) as conn:
        return [r[0] for r in conn.execute(f"SELECT event_id FROM {table}_effects").fetchall()]


def test_an_exception_rolls_back_the_claim_and_the_effect(
    servers: Servers, table: str, joined: tuple[SyncIdempotency, PostgresStore]
) -> None:
    idem, store = joined
    with store.connection_sync() as conn:
        with pytest.raises(RuntimeError), idem.claim("e1", connection=conn):
            conn.execute(f"INSERT INTO {table}_effects VALUES ('e1')")
            raise RuntimeError("handler failed after writing")
        assert effects(servers, table) == []
        with idem.claim("e1", connection=conn) as claim:  # runs again, and commits
            assert not claim.done
            conn.execute(f"INSERT INTO {table}_effects VALUES ('e1')")
            claim.complete("ok")
        with idem.claim("e1", connection=conn) as claim:
            assert claim.done and claim.result == "ok"
    assert effects(servers, table) == ["e1"]


def test_inside_an_open_transaction_the_caller_commits(
    servers: Servers, table: str, joined: tuple[SyncIdempotency, PostgresStore]
) -> None:
    idem, store = joined
    with store.connection_sync() as conn:
        with conn.transaction() as tx:
            with idem.claim("e2", connection=conn) as claim:  # a savepoint
                conn.execute(f"INSERT INTO {table}_effects VALUES ('e2')")
                claim.complete("ok")
            raise psycopg.Rollback(tx)  # the caller changes its mind: nothing commits
        assert effects(servers, table) == []
        with idem.claim("e2", connection=conn) as claim:
            assert not claim.done


def test_a_concurrent_claim_is_busy_or_waits_for_the_outcome(
    servers: Servers, table: str, joined: tuple[SyncIdempotency, PostgresStore]
) -> None:
    idem, store = joined
    inside, finish = threading.Event(), threading.Event()

    def holder() -> None:
        with store.connection_sync() as conn, idem.claim("e3", connection=conn) as claim:
            conn.execute(f"INSERT INTO {table}_effects VALUES ('e3')")
            inside.set()
            finish.wait(10)
            claim.complete("first")

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(10)
    with store.connection_sync() as conn:
        with pytest.raises(AlreadyInProgress), idem.claim("e3", connection=conn):
            pytest.fail("must not run")
        threading.Timer(0.2, finish.set).start()
        with idem.claim("e3", connection=conn, wait=True) as claim:  # blocks on the lock
            assert claim.done and claim.result == "first"
    t.join()
    assert effects(servers, table) == ["e3"]


def test_repeatable_read_is_refused(
    servers: Servers, joined: tuple[SyncIdempotency, PostgresStore]
) -> None:
    idem, _ = joined
    with psycopg.connect(servers.dsn) as conn:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        refused = pytest.raises(psycopg.errors.FeatureNotSupported, match="READ COMMITTED")
        with refused, idem.claim("e4", connection=conn):
            pass
