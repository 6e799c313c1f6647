"""Retention of the PostgreSQL store by time partitions: create ahead, drop past retention.

Records go with their whole partition, never by row deletes. Partitions are attached (a
table of its own, checked to the range, then ``ATTACH PARTITION``) and dropped after
``DETACH PARTITION ... CONCURRENTLY``: both take only SHARE UPDATE EXCLUSIVE on the parent,
which claims do not wait for. One maintainer at a time (a session advisory lock on
``(lock_namespace, 0)``); the others skip, and learn the partitions the maintainer made.

When to maintain is judged on the database's clock (the partitions' bounds are on it): each
maintenance reads ``clock_timestamp()`` and the store counts on from it with the local
monotonic clock, so a client whose wall clock is off neither maintains on every claim nor
misses the next period. Attempts from the claims are spaced at least ``retry_interval``
apart, whatever they found (done, skipped, failed): a claim never opens a connection of its
own for maintenance more often than that.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
from psycopg import errors as pg_errors

log = logging.getLogger("idempotent_consumer.postgres")

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass
class MaintenanceReport:
    """What one :meth:`PostgresStore.maintain` did."""

    created: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    skipped: bool = False  # another process was maintaining the table


class Partitions:
    """The partitions of one records table, and when to maintain them next."""

    def __init__(
        self,
        conninfo: str,
        table: str,
        partition_period: timedelta,
        retention: timedelta,
        partitions_ahead: int,
        lock_namespace: int,
    ) -> None:
        self.conninfo = conninfo
        self.table = table
        self.partition_period = partition_period
        self.retention = retention
        self.partitions_ahead = partitions_ahead
        self.lock_namespace = lock_namespace
        self.period_s = int(partition_period.total_seconds())
        self.covered_until = 0.0  # database epoch seconds up to which partitions exist
        self.next_maintenance = 0.0  # monotonic: the next periodic maintenance
        self.next_attempt = 0.0  # monotonic: no attempt from the claims before this
        #: the least time between two attempts from the claims (any outcome)
        self.retry_interval = max(1.0, min(self.period_s / 4, 60.0))
        # (database epoch seconds, local monotonic) at the last reading of the database clock
        self._clock: tuple[float, float] | None = None
        self._lock = threading.Lock()

    def bounds(self, conn: psycopg.Connection[Any]) -> list[tuple[str, datetime, datetime]]:
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

    def name(self, lo: datetime) -> str:
        return f"{self.table}_p{lo.astimezone(UTC):%Y%m%d_%H%M%S}"

    def db_now(self) -> float | None:
        """The database's clock now (epoch seconds), counted on from its last reading with the
        local monotonic clock; None before the first reading."""
        if self._clock is None:
            return None
        db, mono = self._clock
        return db + (time.monotonic() - mono)

    def _read_clock(self, conn: psycopg.Connection[Any]) -> datetime:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
        assert row is not None
        db_now: datetime = row[0]
        self._clock = ((db_now - _EPOCH).total_seconds(), time.monotonic())
        return db_now

    def _learn(self, conn: psycopg.Connection[Any], db_now: datetime) -> None:
        covered = max([b for _, _, b in self.bounds(conn)], default=db_now)
        self.covered_until = (covered - _EPOCH).total_seconds()

    def maintain(
        self, conn: psycopg.Connection[Any], now: datetime | None = None
    ) -> MaintenanceReport:
        report = MaintenanceReport()
        db_now = self._read_clock(conn)
        got = conn.execute("SELECT pg_try_advisory_lock(%s, 0)", (self.lock_namespace,)).fetchone()
        if not got or not got[0]:
            # Another process maintains: take in the partitions there are, try again later.
            report.skipped = True
            self._learn(conn, db_now)
            return report
        try:
            if now is None:
                now = db_now
            existing = self.bounds(conn)
            period = self.period_s
            current = int((now - _EPOCH).total_seconds() // period) * period
            # Short lock waits: maintenance must never stall the claims for long.
            conn.execute("SET lock_timeout = '2s'")
            for k in range(self.partitions_ahead + 1):
                lo = _EPOCH + timedelta(seconds=current + k * period)
                hi = lo + self.partition_period
                if any(a < hi and lo < b for _, a, b in existing):
                    continue  # covered (also by partitions of an older period length)
                name = self.name(lo)
                self._create(conn, name, lo, hi)
                report.created.append(name)
            cutoff = now - self.retention
            for name, _, hi in existing:
                if hi <= cutoff:
                    self._drop(conn, name)
                    report.dropped.append(name)
            self._learn(conn, db_now)
            self.next_maintenance = time.monotonic() + max(1.0, self.period_s / 4)
        finally:
            conn.execute("RESET lock_timeout")
            conn.execute("SELECT pg_advisory_unlock(%s, 0)", (self.lock_namespace,))
        if report.created or report.dropped:
            log.info(
                "%s: created partitions %s, dropped %s", self.table, report.created, report.dropped
            )
        return report

    def _create(self, conn: psycopg.Connection[Any], name: str, lo: datetime, hi: datetime) -> None:
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

    def due(self, missing: bool = False) -> bool:
        """Should a claim maintain now? Never within ``retry_interval`` of the last attempt;
        then when the partitions end less than a period ahead of the database's clock, when
        the periodic maintenance is due, or when a claim found no partition (``missing``)."""
        mono = time.monotonic()
        if mono < self.next_attempt:
            return False
        if missing:
            return True
        db_now = self.db_now()
        margin = self.period_s  # keep at least one whole period ahead
        return (
            db_now is None or db_now + margin >= self.covered_until or mono >= self.next_maintenance
        )

    def maintain_quietly(self, missing: bool = False) -> None:
        """Maintain on a connection of its own if :meth:`due` (checked again here: one
        attempt at a time, the others return at once); failures are logged."""
        with self._lock:
            if not self.due(missing):
                return
            self.next_attempt = time.monotonic() + self.retry_interval
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                self.maintain(conn)
        except psycopg.Error:
            log.exception("%s: partition maintenance failed (retried later)", self.table)
