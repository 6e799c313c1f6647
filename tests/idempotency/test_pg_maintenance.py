"""Partition maintenance from the claims, on the real PostgreSQL: bounded, and on the
database's clock.

* Another process holds the maintainer lock when the store is first used: the claims that
  follow do not each open a connection to try again (they are spaced ``retry_interval``
  apart), and they still run.
* The client's wall clock is days off the database's: the claims neither maintain on every
  call nor create or drop partitions other than the database's clock calls for.

Connections are counted by wrapping ``psycopg.connect`` (maintenance opens its own; the pools
connect another way and are not counted).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from idempotent_consumer import PostgresStore, SyncIdempotency, _pg_partitions

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency

CLAIMS = 200
DAY = 86_400.0


@pytest.fixture
def connects(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The times of every ``psycopg.connect`` from here on."""
    calls: list[float] = []
    real: Callable[..., Any] = psycopg.connect

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(time.monotonic())
        return real(*args, **kwargs)

    monkeypatch.setattr(psycopg, "connect", counting)
    return calls


@pytest.fixture
def maintainer_lock(servers: Servers, table: str) -> Iterator[None]:
    """The table made, then its maintainer lock held by another connection."""
    PostgresStore(servers.dsn, table=table).create()
    namespace = PostgresStore(servers.dsn, table=table).lock_namespace
    with psycopg.connect(servers.dsn, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, 0)", (namespace,))
        yield
        other.execute("SELECT pg_advisory_unlock(%s, 0)", (namespace,))


def run_claims(store: PostgresStore) -> float:
    """CLAIMS claims of new ids; the seconds they took."""
    idem = SyncIdempotency(store, "billing")
    started = time.monotonic()
    for i in range(CLAIMS):
        with idem.claim(f"e{i}") as claim:
            assert not claim.done
            claim.complete(i)
    return time.monotonic() - started


def allowed(store: PostgresStore, seconds: float) -> int:
    """The most maintenance connections ``seconds`` of claims may open: one at first use,
    then one per ``retry_interval`` (and one more for the edges)."""
    interval = getattr(store._partitions, "retry_interval", 1.0)  # 1.0: the least it is
    return 2 + int(seconds / interval)


def test_claims_while_another_process_maintains_open_few_connections(
    servers: Servers, table: str, maintainer_lock: None, connects: list[float]
) -> None:
    store = PostgresStore(servers.dsn, table=table, create_schema=False, max_size=2)
    try:
        took = run_claims(store)
    finally:
        store.close_sync()
    assert len(connects) <= allowed(store, took), (
        f"{len(connects)} maintenance connections for {CLAIMS} claims in {took:.2f} s"
    )


class SkewedTime(types.SimpleNamespace):
    """The ``time`` module as _pg_partitions sees it: the wall clock ``skew`` seconds off,
    the monotonic clock true."""

    def __init__(self, skew: float) -> None:
        super().__init__(monotonic=time.monotonic, time=lambda: time.time() + skew)


@pytest.mark.parametrize("skew_days", [10, -10])
def test_a_skewed_client_clock_neither_maintains_on_every_claim_nor_moves_partitions(
    servers: Servers,
    table: str,
    connects: list[float],
    monkeypatch: pytest.MonkeyPatch,
    skew_days: int,
) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=2)
    monkeypatch.setattr(_pg_partitions, "time", SkewedTime(skew_days * DAY))
    try:
        store.sync_pool()  # first use: the schema and the partitions, on the database's clock
        before = store.partitions()
        with psycopg.connect(servers.dsn, autocommit=True) as conn:
            row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        db_now = row[0]
        connects.clear()
        took = run_claims(store)
        after = store.partitions()
    finally:
        store.close_sync()
    # the current period and the ones ahead, on the database's clock; nothing dropped
    assert after == before
    assert any(lo <= db_now < hi for _, lo, hi in after)
    assert len(connects) <= allowed(store, took) - 1, (
        f"{len(connects)} maintenance connections for {CLAIMS} claims in {took:.2f} s"
    )
