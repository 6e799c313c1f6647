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

A claim that finds no partition for now cannot succeed until one exists, so it does not
skip: it waits for the maintainer lock (at most ``maintainer_wait``) and maintains under it
(:meth:`Partitions.ensure_current`). Skipping there failed the first claims of a store
started while another process was making the partitions.
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
        #: how long a claim that found no partition waits for another maintainer to finish
        self.maintainer_wait = 10.0
        #: maintenances that held the lock and finished (their partitions exist)
        self.runs = 0
        self.next_ensure = 0.0  # monotonic: no wait from a claim missing a partition before this
        self._missed = ""  # why the last wait for the lock made no partition
        self._ensure_lock = threading.Lock()
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

    def _take_lock(self, conn: psycopg.Connection[Any], wait: float) -> bool:
        """The maintainer lock: only tried (``wait`` 0), or waited for at most ``wait`` s."""
        if wait <= 0:
            got = conn.execute(
                "SELECT pg_try_advisory_lock(%s, 0)", (self.lock_namespace,)
            ).fetchone()
            return bool(got and got[0])
        # lock_timeout bounds advisory-lock waits too; autocommit: a timeout aborts nothing.
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (f"{int(wait * 1000)}ms",))
        try:
            conn.execute("SELECT pg_advisory_lock(%s, 0)", (self.lock_namespace,))
            return True
        except pg_errors.LockNotAvailable:
            return False
        finally:
            conn.execute("RESET lock_timeout")

    def maintain(
        self, conn: psycopg.Connection[Any], now: datetime | None = None, wait: float = 0.0
    ) -> MaintenanceReport:
        """Create and drop partitions under the maintainer lock; skipped when another
        process holds it (after waiting up to ``wait`` seconds for it to finish)."""
        report = MaintenanceReport()
        locked = self._take_lock(conn, wait)
        db_now = self._read_clock(conn)  # after any wait: the current period is judged now
        if not locked:
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
            self.runs += 1
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

    def due(self) -> bool:
        """Should a claim maintain now? Never within ``retry_interval`` of the last attempt;
        then when the partitions end less than a period ahead of the database's clock, or
        when the periodic maintenance is due. (A claim that found no partition goes to
        :meth:`ensure_current` instead.)"""
        mono = time.monotonic()
        if mono < self.next_attempt:
            return False
        db_now = self.db_now()
        margin = self.period_s  # keep at least one whole period ahead
        return (
            db_now is None or db_now + margin >= self.covered_until or mono >= self.next_maintenance
        )

    def maintain_quietly(self) -> None:
        """Maintain on a connection of its own if :meth:`due` (checked again here: one
        attempt at a time, the others return at once); failures are logged."""
        with self._lock:
            if not self.due():
                return
            self.next_attempt = time.monotonic() + self.retry_interval
        try:
            with psycopg.connect(self.conninfo, autocommit=True) as conn:
                self.maintain(conn)
        except psycopg.Error:
            log.exception("%s: partition maintenance failed (retried later)", self.table)

    def ensure_current(self, seen: int) -> str:
        """A claim found no partition for now (``seen``: :attr:`runs` before it asked): make
        sure one exists before it asks again. Returns why there may still be none, for the
        claim's error if its next try misses too.

        Invariant: a claim gives up on a missing partition only after a maintenance that
        held the maintainer lock finished after it asked (so the partition for now exists,
        unless that maintenance failed), or after waiting ``maintainer_wait`` for another
        holder of the lock. The lock is waited for, not tried: its holder is most likely
        another process making these very partitions (consumers started together on a new
        table), and without a partition no claim can succeed anyway. One wait at a time:
        the claims that missed meanwhile wait for its outcome and ask again, without a
        connection of their own. A wait that ran out, or a maintenance that failed, is not
        tried again for ``retry_interval``: until then the claims missing a partition fail
        at once instead of each opening a connection to wait.
        """
        with self._ensure_lock:
            if self.runs != seen:
                return "a maintenance ran meanwhile, yet made none for now"
            left = self.next_ensure - time.monotonic()
            if left > 0:
                return f"{self._missed}; not waited for again for another {left:.0f} s"
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    report = self.maintain(conn, wait=self.maintainer_wait)
                if not report.skipped:
                    return "maintenance ran, yet made none for now"
                self._missed = (
                    f"another process held the maintainer lock (advisory lock "
                    f"({self.lock_namespace}, 0)) for more than {self.maintainer_wait:g} s"
                )
            except psycopg.Error as exc:
                log.exception("%s: partition maintenance failed (retried later)", self.table)
                self._missed = f"maintenance failed ({type(exc).__name__}: {exc})"
            self.next_ensure = time.monotonic() + self.retry_interval
            return self._missed
