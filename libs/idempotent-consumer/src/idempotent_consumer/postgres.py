"""PostgreSQL store (psycopg 3, pooled): a processed-events table keyed by (processor, event id).

The claim is one call of a PL/pgSQL function, ``<table>_claim``, whose heart is
``INSERT ... ON CONFLICT DO NOTHING``: one row inserted is a new claim, none a repeat. The
table is partitioned by time (``period``, the start of the partition period of the first
claim), so old records go by dropping whole partitions, not by row deletes. A unique index on
a partitioned table must contain the partition key, so the key ``(processor, event_id,
period)`` is unique within one period only; a transaction-level advisory lock on the
(processor, event id) pair makes the look-up across periods and the insert one atomic step,
so two claims of one id in different periods cannot both win. The lock is held for one
statement, or until the caller's transaction ends when the claim joins it.

Joined to the caller's transaction (``idem.claim(..., connection=conn)``) the claim, the
effects written on ``conn`` and the completed record commit together: the in-progress row is
never visible to anyone else, a crash rolls all of it back, and a concurrent claim of the
same id waits for that transaction, at most the lease or the ``wait=`` given (or gets
``AlreadyInProgress`` at once when not waiting, or once that wait is over). Such
transactions must run at READ COMMITTED (PostgreSQL's default); the function refuses others.

Schema: created on first use (``create_schema=True``) or by
``python -m idempotent_consumer schema --dsn URL`` (``--print`` shows the SQL). Retention:
:meth:`PostgresStore.maintain` creates the next partitions and detaches (CONCURRENTLY) and
drops the partitions whose whole period ended more than ``retention`` ago; the store runs it
on first use and then at most every ``partition_period / 4`` as claims come in, or run
``python -m idempotent_consumer maintain --dsn URL`` from cron. One maintainer at a time
(a session advisory lock); the others skip.
"""

from __future__ import annotations

import asyncio
import re
import threading
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._base import ClaimReply, ClaimRequest, Held, millis, positive
from ._pg_partitions import MaintenanceReport, Partitions
from ._pg_schema import Calls, schema_sql

__all__ = ["MaintenanceReport", "PostgresStore", "schema_sql"]

_NAME = re.compile(r"^(?:[a-z_][a-z0-9_]{0,40}\.)?[a-z_][a-z0-9_]{0,40}$")


class PostgresStore:
    """Idempotency records in PostgreSQL (psycopg 3 connection pools, created lazily).

    ``conninfo``: a libpq URL or DSN. ``table``: the parent table (``schema.table`` allowed,
    lower-case). ``partition_period``: the span of one partition. ``retention``: how long
    records are kept at least (the longest ``expire_after`` allowed); a partition is dropped
    once its whole period ended longer ago than that, so records live between ``retention``
    and ``retention + partition_period``. ``partitions_ahead``: partitions created in advance.
    ``create_schema``: create the table and functions on first use (else run the
    ``schema`` command once). ``min_size``/``max_size``: each pool's size.
    """

    def __init__(
        self,
        conninfo: str,
        *,
        table: str = "idempotency_records",
        partition_period: timedelta = timedelta(days=1),
        retention: timedelta = timedelta(days=7),
        partitions_ahead: int = 2,
        create_schema: bool = True,
        min_size: int = 1,
        max_size: int = 10,
    ) -> None:
        if not _NAME.match(table):
            raise ValueError(f"table name {table!r}: lower-case letters, digits, _ (schema.table)")
        self.conninfo = conninfo
        self.table = table
        self.partition_period = positive(partition_period, "partition_period")
        if self.partition_period < timedelta(seconds=1):
            raise ValueError("partition_period must be at least 1 s")
        self.retention = positive(retention, "retention")
        self.max_expire_after: timedelta | None = self.retention
        self.partitions_ahead = max(1, partitions_ahead)
        self.create_schema = create_schema
        self.min_size = min_size
        self.max_size = max_size
        # Advisory-lock namespace of this table: the seed of each claim's 64-bit key (the
        # one-bigint lock space) and (namespace, 0) for the maintainer (the two-int space,
        # which never overlaps the other).
        self.lock_namespace = zlib.crc32(table.encode()) - (1 << 31)
        self._period_s = int(self.partition_period.total_seconds())
        self._partitions = Partitions(
            conninfo,
            table,
            self.partition_period,
            self.retention,
            self.partitions_ahead,
            self.lock_namespace,
        )
        self._pool: AsyncConnectionPool | None = None
        self._sync_pool: ConnectionPool | None = None
        self._async_lock: asyncio.Lock | None = None
        self._sync_lock = threading.Lock()
        self._calls = Calls(table, self._period_s)

    def schema_sql(self) -> str:
        return schema_sql(self.table, self.lock_namespace)

    # -- pools ----------------------------------------------------------------------------

    async def pool(self) -> AsyncConnectionPool:
        """The async pool (autocommit connections), opened and the schema made on first use."""
        if self._pool is None:
            if self._async_lock is None:
                self._async_lock = asyncio.Lock()
            async with self._async_lock:
                if self._pool is None:
                    pool = AsyncConnectionPool(
                        self.conninfo,
                        min_size=self.min_size,
                        max_size=self.max_size,
                        kwargs={"autocommit": True},
                        open=False,
                    )
                    await pool.open(wait=True)
                    self._pool = pool
                    await asyncio.to_thread(self._first_use)
        return self._pool

    def sync_pool(self) -> ConnectionPool:
        """The sync pool (autocommit connections), opened and the schema made on first use."""
        if self._sync_pool is None:
            with self._sync_lock:
                if self._sync_pool is None:
                    pool = ConnectionPool(
                        self.conninfo,
                        min_size=self.min_size,
                        max_size=self.max_size,
                        kwargs={"autocommit": True},
                        open=True,
                    )
                    pool.wait()
                    self._sync_pool = pool
                    self._first_use()
        return self._sync_pool

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        """A pooled autocommit connection: ``async with conn.transaction()`` on it begins a
        transaction that an ``idem.claim(..., connection=conn)`` can join."""
        pool = await self.pool()
        async with pool.connection() as conn:
            yield conn

    @contextmanager
    def connection_sync(self) -> Iterator[psycopg.Connection[Any]]:
        with self.sync_pool().connection() as conn:
            yield conn

    async def close(self) -> None:
        if self._pool is not None:
            await self._pool.close()
            self._pool = None
        self.close_sync()

    def close_sync(self) -> None:
        if self._sync_pool is not None:
            self._sync_pool.close()
            self._sync_pool = None

    # -- schema and retention -------------------------------------------------------------

    def _first_use(self) -> None:
        """Schema (if asked) and partitions, on a connection of its own (sync, short)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            if self.create_schema:
                self._create_schema(conn)
            self._partitions.maintain(conn)

    def _create_schema(self, conn: psycopg.Connection[Any]) -> None:
        # Serialised: two processes creating the same function at once can fail with
        # "tuple concurrently updated".
        conn.execute("SELECT pg_advisory_lock(%s, 0)", (self.lock_namespace,))
        try:
            conn.execute(self.schema_sql().encode())
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s, 0)", (self.lock_namespace,))

    def create(self) -> MaintenanceReport:
        """Create the table, its functions and partitions now (the ``schema`` command)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            self._create_schema(conn)
            return self._partitions.maintain(conn)

    def maintain(self, now: datetime | None = None) -> MaintenanceReport:
        """Create the partitions up to ``partitions_ahead`` periods ahead and drop the ones
        whose whole period ended more than ``retention`` before ``now`` (the database's
        clock when not given)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return self._partitions.maintain(conn, now)

    def partitions(self) -> list[tuple[str, datetime, datetime]]:
        """(name, from, to) of every partition, oldest first."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return self._partitions.bounds(conn)

    def _no_partition(self, cause: str) -> RuntimeError:
        ns = self.lock_namespace
        return RuntimeError(
            f"{self.table}: no partition for now, so no claim can be stored: {cause}. Fix: "
            "find the session holding the maintainer lock (pg_locks: locktype 'advisory', "
            f"classid {ns % (1 << 32)}, objid 0) and let it finish or end it, then run "
            "`python -m idempotent_consumer maintain --dsn URL` (or a store's maintain()); "
            "if maintenance failed, its error is logged by idempotent_consumer.postgres"
        )

    # -- the async store ------------------------------------------------------------------
    # The claim answers "no_partition" (not an error: a transaction it joined survives) when
    # the current period's partition is missing; the store makes sure it exists (waiting,
    # bounded, for another process that holds the maintainer lock: Partitions.ensure_current)
    # and asks once more, joined or not.

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        pool = await self.pool()
        if self._partitions.due():
            await asyncio.to_thread(self._partitions.maintain_quietly)
        params = self._calls.claim_params(request)
        seen = self._partitions.runs
        cause = ""
        for attempt in (1, 2):
            if connection is not None:
                cur = await connection.execute(self._calls.claim_sql, params)
                reply = self._calls.reply(await cur.fetchone())
            else:
                async with pool.connection() as conn:
                    cur = await conn.execute(self._calls.claim_sql, params)
                    reply = self._calls.reply(await cur.fetchone())
            if reply is not None:
                return reply
            if attempt == 1:
                cause = await asyncio.to_thread(self._partitions.ensure_current, seen)
        raise self._no_partition(cause)

    async def _finish(self, params: tuple[Any, ...], connection: Any) -> bool:
        if connection is not None:
            cur = await connection.execute(self._calls.finish_sql, params)
        else:
            pool = await self.pool()
            async with pool.connection() as conn:
                cur = await conn.execute(self._calls.finish_sql, params)
                row = await cur.fetchone()
                return bool(row and row[0] == 1)
        row = await cur.fetchone()
        return bool(row and row[0] == 1)

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        return await self._finish(self._calls.finish_params(held, "c", result, 0), connection)

    async def release(self, held: Held, connection: Any = None) -> bool:
        return await self._finish(self._calls.finish_params(held, "r", None, 0), connection)

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        params = self._calls.finish_params(held, "e", None, millis(lease))
        return await self._finish(params, connection)

    # -- the sync store -------------------------------------------------------------------

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        pool = self.sync_pool()
        if self._partitions.due():
            self._partitions.maintain_quietly()
        params = self._calls.claim_params(request)
        seen = self._partitions.runs
        cause = ""
        for attempt in (1, 2):
            if connection is not None:
                reply = self._calls.reply(
                    connection.execute(self._calls.claim_sql, params).fetchone()
                )
            else:
                with pool.connection() as conn:
                    reply = self._calls.reply(
                        conn.execute(self._calls.claim_sql, params).fetchone()
                    )
            if reply is not None:
                return reply
            if attempt == 1:
                cause = self._partitions.ensure_current(seen)
        raise self._no_partition(cause)

    def _finish_sync(self, params: tuple[Any, ...], connection: Any) -> bool:
        if connection is not None:
            row = connection.execute(self._calls.finish_sql, params).fetchone()
        else:
            with self.sync_pool().connection() as conn:
                row = conn.execute(self._calls.finish_sql, params).fetchone()
        return bool(row and row[0] == 1)

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        return self._finish_sync(self._calls.finish_params(held, "c", result, 0), connection)

    def release_sync(self, held: Held, connection: Any = None) -> bool:
        return self._finish_sync(self._calls.finish_params(held, "r", None, 0), connection)

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        return self._finish_sync(
            self._calls.finish_params(held, "e", None, millis(lease)), connection
        )
