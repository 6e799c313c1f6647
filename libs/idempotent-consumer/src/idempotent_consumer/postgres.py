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
same id waits for that transaction (or gets ``AlreadyInProgress`` when not waiting). Such
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
import logging
import re
import threading
import time
import uuid
import zlib
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from ._base import ClaimReply, ClaimRequest, Held, Outcome, millis, positive

log = logging.getLogger("idempotent_consumer.postgres")

_NAME = re.compile(r"^(?:[a-z_][a-z0-9_]{0,40}\.)?[a-z_][a-z0-9_]{0,40}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def schema_sql(table: str, lock_namespace: int) -> str:
    """The DDL of the table and its functions (idempotent: safe to run again)."""
    t = table
    # 64 bits of the key (the one-bigint form of the advisory locks, seeded per table): a
    # 32-bit hash makes two live ids collide about once in 77,000, and a collision answers
    # "busy" for an id nobody holds.
    lock = f"hashtextextended(p_processor || chr(31) || p_event_id, {lock_namespace})"
    return f"""
CREATE TABLE IF NOT EXISTS {t} (
    processor    text        NOT NULL,  -- the consumer group's namespace
    event_id     text        NOT NULL,  -- the producer's id of the event
    period       timestamptz NOT NULL,  -- start of the partition period of the first claim
    state        "char"      NOT NULL,  -- 'p' in progress, 'c' completed
    token        uuid        NOT NULL,  -- the current holder's claim (fences old holders out)
    payload_hash bytea,                 -- SHA-256 of the first claim's payload, if given
    claimed_at   timestamptz NOT NULL,
    lease_until  timestamptz,           -- in progress: when another holder may take over
    expires_at   timestamptz NOT NULL,  -- after this the id counts as new again
    attempts     integer     NOT NULL,  -- claims so far (2+: taken over from a dead holder)
    result       bytea,                 -- completed: the first run's serialized result
    completed_at timestamptz,
    PRIMARY KEY (processor, event_id, period)
) PARTITION BY RANGE (period);

CREATE OR REPLACE FUNCTION {t}_claim(
    p_processor text, p_event_id text, p_hash bytea, p_token uuid,
    p_lease_ms bigint, p_expire_ms bigint, p_period_s bigint, p_block boolean,
    OUT outcome text, OUT o_result bytea, OUT o_retry_ms bigint, OUT o_attempts integer,
    OUT o_period timestamptz)
LANGUAGE plpgsql AS $fn$
DECLARE
    r {t}%ROWTYPE;
    v_now timestamptz := clock_timestamp();
    v_lock bigint := {lock};
    v_found boolean;
    v_rows integer;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'idempotency claims need READ COMMITTED, not %',
            current_setting('transaction_isolation') USING ERRCODE = 'feature_not_supported';
    END IF;
    -- One claim, complete, release or extend of this (processor, event id) at a time, across
    -- all partitions ({t}_finish takes the same lock).
    IF p_block THEN
        PERFORM pg_advisory_xact_lock(v_lock);
    ELSIF NOT pg_try_advisory_xact_lock(v_lock) THEN
        outcome := 'busy';
        RETURN;
    END IF;
    SELECT * INTO r FROM {t}
     WHERE processor = p_processor AND event_id = p_event_id
     ORDER BY period DESC LIMIT 1;
    v_found := FOUND;
    IF v_found AND r.expires_at <= v_now THEN
        DELETE FROM {t} WHERE processor = p_processor AND event_id = p_event_id;
        v_found := false;
    END IF;
    IF NOT v_found THEN
        o_period := to_timestamp(floor(extract(epoch FROM v_now) / p_period_s) * p_period_s);
        BEGIN
            INSERT INTO {t} (processor, event_id, period, state, token, payload_hash,
                             claimed_at, lease_until, expires_at, attempts)
            VALUES (p_processor, p_event_id, o_period, 'p', p_token, p_hash, v_now,
                    v_now + p_lease_ms * interval '1 millisecond',
                    v_now + p_expire_ms * interval '1 millisecond', 1)
            ON CONFLICT DO NOTHING;
        EXCEPTION WHEN check_violation THEN
            -- No partition for now: answered, not raised, so a caller's transaction that
            -- this claim joined survives; the store creates the partition and asks again.
            outcome := 'no_partition';
            RETURN;
        END;
        GET DIAGNOSTICS v_rows = ROW_COUNT;
        IF v_rows = 1 THEN
            outcome := 'acquired';
            o_attempts := 1;
            RETURN;
        END IF;
        RAISE EXCEPTION 'claim of % conflicted under its lock', p_event_id;  -- cannot happen
    END IF;
    o_period := r.period;
    o_attempts := r.attempts;
    IF r.payload_hash IS NOT NULL AND p_hash IS NOT NULL AND r.payload_hash <> p_hash THEN
        outcome := 'mismatch';
        RETURN;
    END IF;
    IF r.state = 'c' THEN
        outcome := 'completed';
        o_result := r.result;
        RETURN;
    END IF;
    IF r.lease_until > v_now THEN
        outcome := 'in_progress';
        o_retry_ms := ceil(extract(epoch FROM r.lease_until - v_now) * 1000);
        RETURN;
    END IF;
    -- The holder's lease ended (it crashed or hung): take the claim over, only from the row
    -- as read (its token, still in progress, lease still ended). The lock keeps the old
    -- holder's complete and release out; the conditions and the row count keep this step
    -- right on its own: a row that changed or vanished is never taken over, the caller
    -- is told to ask again.
    UPDATE {t} SET token = p_token, attempts = r.attempts + 1,
                   lease_until = v_now + p_lease_ms * interval '1 millisecond',
                   payload_hash = coalesce(r.payload_hash, p_hash)
     WHERE processor = p_processor AND event_id = p_event_id AND period = r.period
       AND token = r.token AND state = 'p' AND lease_until <= v_now;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    IF v_rows <> 1 THEN
        outcome := 'busy';
        RETURN;
    END IF;
    outcome := 'taken_over';
    o_attempts := r.attempts + 1;
END
$fn$;

-- The holder's complete ('c'), release ('r') or extend ('e'), under the claim's lock: without
-- it a late complete or release could commit between a takeover's read and its update.
-- Returns the rows changed (1: done; 0: the token no longer holds the record).
CREATE OR REPLACE FUNCTION {t}_finish(
    p_processor text, p_event_id text, p_period timestamptz, p_token uuid,
    p_action "char", p_result bytea, p_lease_ms bigint)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    v_rows integer;
BEGIN
    PERFORM pg_advisory_xact_lock({lock});
    IF p_action = 'c' THEN
        UPDATE {t} SET state = 'c', result = p_result, lease_until = NULL,
                       completed_at = clock_timestamp()
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    ELSIF p_action = 'r' THEN
        DELETE FROM {t}
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    ELSE
        UPDATE {t} SET lease_until = clock_timestamp() + p_lease_ms * interval '1 millisecond'
         WHERE processor = p_processor AND event_id = p_event_id AND period = p_period
           AND token = p_token AND state = 'p';
    END IF;
    GET DIAGNOSTICS v_rows = ROW_COUNT;
    RETURN v_rows;
END
$fn$;
"""


@dataclass
class MaintenanceReport:
    """What one :meth:`PostgresStore.maintain` did."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: bool = False  # another process was maintaining the table


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
        self._pool: AsyncConnectionPool | None = None
        self._sync_pool: ConnectionPool | None = None
        self._async_lock: asyncio.Lock | None = None
        self._sync_lock = threading.Lock()
        self._covered_until = 0.0  # epoch seconds up to which partitions exist (our view)
        self._next_maintenance = 0.0  # monotonic
        self._sql_claim = (
            f"SELECT outcome, o_result, o_retry_ms, o_attempts, o_period "
            f"FROM {table}_claim(%s, %s, %s, %s, %s, %s, %s, %s)"
        )
        self._sql_finish = f"SELECT {table}_finish(%s, %s, %s, %s, %s, %s, %s)"

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
            self._maintain(conn)

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
            return self._maintain(conn)

    def maintain(self, now: datetime | None = None) -> MaintenanceReport:
        """Create the partitions up to ``partitions_ahead`` periods ahead and drop the ones
        whose whole period ended more than ``retention`` before ``now`` (the database's
        clock when not given)."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return self._maintain(conn, now)

    def _bounds(self, conn: psycopg.Connection[Any]) -> list[tuple[str, datetime, datetime]]:
        rows = conn.execute(
            r"""
            SELECT c.oid::regclass::text,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)'))[1]::timestamptz,
                   (regexp_match(pg_get_expr(c.relpartbound, c.oid),
                                 'FROM \(''([^'']+)''\) TO \(''([^'']+)''\)'))[2]::timestamptz
              FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
             WHERE i.inhparent = %s::regclass
             ORDER BY 2
            """,
            (self.table,),
        ).fetchall()
        return [(name, lo, hi) for name, lo, hi in rows]

    def partitions(self) -> list[tuple[str, datetime, datetime]]:
        """(name, from, to) of every partition, oldest first."""
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            return self._bounds(conn)

    def _partition_name(self, lo: datetime) -> str:
        return f"{self.table}_p{lo.astimezone(UTC):%Y%m%d_%H%M%S}"

    def _maintain(
        self, conn: psycopg.Connection[Any], now: datetime | None = None
    ) -> MaintenanceReport:
        report = MaintenanceReport()
        got = conn.execute("SELECT pg_try_advisory_lock(%s, 0)", (self.lock_namespace,)).fetchone()
        if not got or not got[0]:
            report.skipped = True
            return report
        try:
            if now is None:
                row = conn.execute("SELECT clock_timestamp()").fetchone()
                assert row is not None
                now = row[0]
            assert now is not None
            existing = self._bounds(conn)
            period = self._period_s
            current = int((now - _EPOCH).total_seconds() // period) * period
            # Short lock waits: maintenance must never stall the claims for long.
            conn.execute("SET lock_timeout = '2s'")
            for k in range(self.partitions_ahead + 1):
                lo = _EPOCH + timedelta(seconds=current + k * period)
                hi = lo + self.partition_period
                if any(a < hi and lo < b for _, a, b in existing):
                    continue  # covered (also by partitions of an older period length)
                name = self._partition_name(lo)
                self._create_partition(conn, name, lo, hi)
                report.created.append(name)
            cutoff = now - self.retention
            for name, _, hi in existing:
                if hi <= cutoff:
                    self._drop(conn, name)
                    report.dropped.append(name)
            covered = max([b for _, _, b in self._bounds(conn)], default=now)
            self._covered_until = (covered - _EPOCH).total_seconds()
            self._next_maintenance = time.monotonic() + max(1.0, self._period_s / 4)
        finally:
            conn.execute("RESET lock_timeout")
            conn.execute("SELECT pg_advisory_unlock(%s, 0)", (self.lock_namespace,))
        if report.created or report.dropped:
            log.info(
                "%s: created partitions %s, dropped %s", self.table, report.created, report.dropped
            )
        return report

    def _create_partition(
        self, conn: psycopg.Connection[Any], name: str, lo: datetime, hi: datetime
    ) -> None:
        # CREATE TABLE ... PARTITION OF would lock the parent against the claims (ACCESS
        # EXCLUSIVE); a table of its own, checked to the range and then attached, takes SHARE
        # UPDATE EXCLUSIVE only, which claims do not conflict with.
        bounds = f"FROM ('{lo.isoformat()}') TO ('{hi.isoformat()}')"
        check = f"period >= '{lo.isoformat()}' AND period < '{hi.isoformat()}'"
        conn.execute(f"DROP TABLE IF EXISTS {name}")  # a leftover of a failed attach
        conn.execute(f"CREATE TABLE {name} (LIKE {self.table} INCLUDING DEFAULTS)")
        conn.execute(
            f"ALTER TABLE {name} ADD CONSTRAINT {name.split('.')[-1]}_range CHECK ({check})"
        )
        conn.execute(f"ALTER TABLE {self.table} ATTACH PARTITION {name} FOR VALUES {bounds}")
        conn.execute(f"ALTER TABLE {name} DROP CONSTRAINT {name.split('.')[-1]}_range")

    def _drop(self, conn: psycopg.Connection[Any], name: str) -> None:
        # DETACH ... CONCURRENTLY takes no lock that blocks the claims (PostgreSQL 14+); the
        # detached table is then dropped on its own. A detach interrupted half-way is
        # finished with FINALIZE.
        try:
            conn.execute(f"ALTER TABLE {self.table} DETACH PARTITION {name} CONCURRENTLY")
        except pg_errors.ObjectNotInPrerequisiteState:
            conn.execute(f"ALTER TABLE {self.table} DETACH PARTITION {name} FINALIZE")
        except pg_errors.FeatureNotSupported:  # before PostgreSQL 14
            conn.execute(f"ALTER TABLE {self.table} DETACH PARTITION {name}")
        conn.execute(f"DROP TABLE IF EXISTS {name}")

    def _maintenance_due(self) -> bool:
        now = time.time()
        margin = self._period_s  # keep at least one whole period ahead
        return now + margin >= self._covered_until or time.monotonic() >= self._next_maintenance

    def _maintain_quietly(self) -> None:
        self._next_maintenance = time.monotonic() + max(1.0, self._period_s / 4)
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                self._maintain(conn)
        except psycopg.Error:
            log.exception("%s: partition maintenance failed (retried later)", self.table)

    # -- the async store ------------------------------------------------------------------

    def _claim_params(self, r: ClaimRequest) -> tuple[Any, ...]:
        return (
            r.processor,
            r.event_id,
            r.payload_hash,
            uuid.UUID(hex=r.token),
            millis(r.lease),
            millis(r.expire_after),
            self._period_s,
            r.block,
        )

    @staticmethod
    def _reply(row: tuple[Any, ...] | None) -> ClaimReply | None:
        """The claim's reply; None when the current period has no partition yet."""
        assert row is not None
        outcome, result, retry_ms, attempts, period = row
        if outcome == "no_partition":
            return None
        return ClaimReply(
            Outcome(outcome),
            result=bytes(result) if result is not None else None,
            retry_after=retry_ms / 1000 if retry_ms else None,
            attempts=attempts,
            locator=period,
        )

    @staticmethod
    def _finish_params(held: Held, action: str, result: bytes | None, lease_ms: int) -> Any:
        token = uuid.UUID(hex=held.token)
        return (held.processor, held.event_id, held.locator, token, action, result, lease_ms)

    # The claim answers "no_partition" (not an error: a transaction it joined survives) when
    # the current period's partition is missing; the store creates it and asks once more,
    # joined or not.

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        pool = await self.pool()
        if self._maintenance_due():
            await asyncio.to_thread(self._maintain_quietly)
        params = self._claim_params(request)
        for attempt in (1, 2):
            if connection is not None:
                cur = await connection.execute(self._sql_claim, params)
                reply = self._reply(await cur.fetchone())
            else:
                async with pool.connection() as conn:
                    cur = await conn.execute(self._sql_claim, params)
                    reply = self._reply(await cur.fetchone())
            if reply is not None:
                return reply
            if attempt == 1:
                await asyncio.to_thread(self._maintain_quietly)
        raise RuntimeError(f"{self.table}: no partition for now, and maintenance made none")

    async def _finish(self, params: tuple[Any, ...], connection: Any) -> bool:
        if connection is not None:
            cur = await connection.execute(self._sql_finish, params)
        else:
            pool = await self.pool()
            async with pool.connection() as conn:
                cur = await conn.execute(self._sql_finish, params)
                row = await cur.fetchone()
                return bool(row and row[0] == 1)
        row = await cur.fetchone()
        return bool(row and row[0] == 1)

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        return await self._finish(self._finish_params(held, "c", result, 0), connection)

    async def release(self, held: Held, connection: Any = None) -> bool:
        return await self._finish(self._finish_params(held, "r", None, 0), connection)

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        params = self._finish_params(held, "e", None, millis(lease))
        return await self._finish(params, connection)

    # -- the sync store -------------------------------------------------------------------

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        pool = self.sync_pool()
        if self._maintenance_due():
            self._maintain_quietly()
        params = self._claim_params(request)
        for attempt in (1, 2):
            if connection is not None:
                reply = self._reply(connection.execute(self._sql_claim, params).fetchone())
            else:
                with pool.connection() as conn:
                    reply = self._reply(conn.execute(self._sql_claim, params).fetchone())
            if reply is not None:
                return reply
            if attempt == 1:
                self._maintain_quietly()
        raise RuntimeError(f"{self.table}: no partition for now, and maintenance made none")

    def _finish_sync(self, params: tuple[Any, ...], connection: Any) -> bool:
        if connection is not None:
            row = connection.execute(self._sql_finish, params).fetchone()
        else:
            with self.sync_pool().connection() as conn:
                row = conn.execute(self._sql_finish, params).fetchone()
        return bool(row and row[0] == 1)

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        return self._finish_sync(self._finish_params(held, "c", result, 0), connection)

    def release_sync(self, held: Held, connection: Any = None) -> bool:
        return self._finish_sync(self._finish_params(held, "r", None, 0), connection)

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        return self._finish_sync(self._finish_params(held, "e", None, millis(lease)), connection)
