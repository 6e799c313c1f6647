"""The idempotency tier: the idempotent-consumer library on a real PostgreSQL and Redis.

``scripts/servers.sh up`` starts both (installing them from Debian's packages when missing) on
``DEDUPE_TEST_PG_PORT`` (15432) and ``DEDUPE_TEST_REDIS_PORT`` (16379), data under .cache/;
they are left running after the session, as the test broker is (``make servers-down``).
Every test gets its own table and key prefix, so tests never see each other's records.
Figures the tests measure go to the session's summary (``figures``), and the closing note
of issue 23 quotes them.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
import pytest
import redis
from idempotent_consumer import MemoryStore, PostgresStore, RedisStore

from tests.support import ROOT, unique_suffix

PG_PORT = int(os.environ.get("DEDUPE_TEST_PG_PORT", "15432"))
REDIS_PORT = int(os.environ.get("DEDUPE_TEST_REDIS_PORT", "16379"))
SERVERS = ROOT / "scripts" / "servers.sh"

FIGURES: list[str] = []


@dataclass(frozen=True)
class Servers:
    dsn: str
    redis_url: str
    redis_bin: str


def servers_env() -> dict[str, str]:
    return dict(os.environ, PG_PORT=str(PG_PORT), REDIS_PORT=str(REDIS_PORT))


@pytest.fixture(scope="session")
def servers() -> Servers:
    up = subprocess.run(
        [str(SERVERS), "up"], env=servers_env(), capture_output=True, text=True, timeout=600
    )
    if up.returncode != 0:
        pytest.fail(f"cannot start PostgreSQL/Redis:\n{up.stdout}\n{up.stderr}")
    binary = subprocess.run(
        [str(SERVERS), "redis-bin"], env=servers_env(), capture_output=True, text=True, check=True
    ).stdout.strip()
    return Servers(
        dsn=f"postgresql://postgres@127.0.0.1:{PG_PORT}/postgres",
        redis_url=f"redis://127.0.0.1:{REDIS_PORT}/0",
        redis_bin=binary,
    )


@pytest.fixture
def table(servers: Servers) -> Iterator[str]:
    """A fresh table name; the table, its partitions and functions are dropped afterwards."""
    name = f"idem_{unique_suffix()}"
    yield name
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"DROP TABLE IF EXISTS {name} CASCADE")
        conn.execute(f"DROP TABLE IF EXISTS {name}_effects")
        for (function,) in conn.execute(
            "SELECT oid::regprocedure::text FROM pg_proc WHERE proname LIKE %s",
            (f"{name}\\_%",),
        ).fetchall():
            conn.execute(f"DROP FUNCTION IF EXISTS {function}")
        for (part,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", (f"{name}_p%",)
        ).fetchall():
            conn.execute(f"DROP TABLE IF EXISTS {part}")


@pytest.fixture
def prefix(servers: Servers) -> Iterator[str]:
    """A fresh Redis key prefix; its keys are deleted afterwards."""
    p = f"t{unique_suffix()}:"
    yield p
    client = redis.Redis.from_url(servers.redis_url)
    keys = list(client.scan_iter(f"{p}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def build_store(kind: str, servers: Servers, table: str, prefix: str) -> Any:
    """A store of ``kind`` (memory, postgres, redis) on the test servers, in the test's own
    table (PostgreSQL) or key prefix (Redis)."""
    if kind == "memory":
        return MemoryStore(10_000)
    if kind == "postgres":
        return PostgresStore(servers.dsn, table=table, max_size=4)
    if kind == "redis":
        return RedisStore(servers.redis_url, prefix=prefix)
    raise ValueError(f"no store {kind!r}")


@contextlib.asynccontextmanager
async def open_store(kind: str, servers: Servers, table: str, prefix: str) -> AsyncIterator[Any]:
    """:func:`build_store`, closed afterwards (a memory store has nothing to close)."""
    store = build_store(kind, servers, table, prefix)
    try:
        yield store
    finally:
        if hasattr(store, "close"):
            await store.close()


@contextlib.contextmanager
def open_sync_store(kind: str, servers: Servers, table: str, prefix: str) -> Iterator[Any]:
    """:func:`build_store` for the sync API, closed afterwards."""
    store = build_store(kind, servers, table, prefix)
    try:
        yield store
    finally:
        if hasattr(store, "close_sync"):
            store.close_sync()


@pytest.fixture(scope="session")
def figures() -> list[str]:
    return FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("idempotency figures")
        for line in FIGURES:
            terminalreporter.write_line(line)
