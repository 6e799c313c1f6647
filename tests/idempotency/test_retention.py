"""PostgreSQL retention: whole time partitions are detached and dropped, never row deletes,
and claims go on while that happens."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import psycopg
import pytest
from idempotent_consumer import PostgresStore, SyncIdempotency

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency

PERIOD = timedelta(seconds=2)


def wait_for_next_period(dsn: str) -> None:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT extract(epoch FROM clock_timestamp())").fetchone()
    assert row is not None
    now = float(row[0])
    period = PERIOD.total_seconds()
    time.sleep((now // period + 1) * period - now + 0.05)


def test_retention_drops_whole_partitions(servers: Servers, table: str, figures: list[str]) -> None:
    store = PostgresStore(
        servers.dsn, table=table, partition_period=PERIOD, retention=timedelta(seconds=4)
    )
    idem = SyncIdempotency(
        store, "billing", lease=timedelta(seconds=2), expire_after=timedelta(seconds=4)
    )
    wait_for_next_period(servers.dsn)  # both batches well inside their own period
    old_ids = [f"old-{i}" for i in range(50)]
    for e in old_ids:
        with idem.claim(e) as claim:
            claim.complete(e)
    wait_for_next_period(servers.dsn)
    new_ids = [f"new-{i}" for i in range(50)]
    for e in new_ids:
        with idem.claim(e) as claim:
            claim.complete(e)
    with psycopg.connect(servers.dsn) as conn:
        periods = dict(conn.execute(f"SELECT event_id, period FROM {table}").fetchall())
    old_period, new_period = periods["old-0"], periods["new-0"]
    assert old_period < new_period
    by_start = {lo: (name, hi) for name, lo, hi in store.partitions()}
    old_name, old_hi = by_start[old_period]
    new_name, _ = by_start[new_period]

    # Claims keep running in another thread while the partition is detached and dropped.
    stop = threading.Event()
    latencies: list[float] = []

    def claimer() -> None:
        i = 0
        while not stop.is_set():
            started = time.monotonic()
            with idem.claim(f"during-{i}") as claim:
                claim.complete(i)
            latencies.append(time.monotonic() - started)
            i += 1

    thread = threading.Thread(target=claimer)
    thread.start()
    time.sleep(0.2)
    started = time.monotonic()
    report = store.maintain(now=old_hi + store.retention)  # as if retention had passed
    took = time.monotonic() - started
    time.sleep(0.2)
    stop.set()
    thread.join()

    assert old_name in report.dropped and new_name not in report.dropped
    with psycopg.connect(servers.dsn) as conn:
        left = conn.execute(
            f"SELECT count(*) FILTER (WHERE event_id LIKE 'old-%%'), "
            f"count(*) FILTER (WHERE event_id LIKE 'new-%%') FROM {table}"
        ).fetchone()
        gone = conn.execute("SELECT to_regclass(%s)", (old_name,)).fetchone()
    assert left == (0, 50)
    assert gone == (None,), "the detached partition is dropped too"
    with idem.claim("old-1") as claim:  # forgotten: new again
        assert not claim.done
    with idem.claim("new-1") as claim:  # kept: a repeat
        assert claim.done and claim.result == "new-1"
    assert latencies and max(latencies) < 1.0, max(latencies)
    figures.append(
        f"retention: partition {old_name} (50 ids) detached and dropped in {took:.2f} s; "
        f"{len(latencies)} claims meanwhile, slowest {max(latencies) * 1000:.0f} ms"
    )
    store.close_sync()
