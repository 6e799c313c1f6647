"""Command line: PostgreSQL schema and retention, bounded-store sizing.

How to run::

    python -m idempotent_consumer schema --dsn postgresql://...     # create table + functions
    python -m idempotent_consumer schema --print                    # show the SQL only
    python -m idempotent_consumer maintain --dsn postgresql://...   # partitions (cron it)
    python -m idempotent_consumer sizing --catch 0.9 --after 3600000

``sizing`` prints ``slots=34168399 catch_rate=0.9000 after=3600000`` for the example above
(the NSQ design's 1.56M slots catch 10% of those repeats, not 90%).
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta

from .memory import catch_rate, slots_for


def _store_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dsn", help="libpq URL, e.g. postgresql://user@host:5432/db")
    p.add_argument("--table", default="idempotency_records")
    p.add_argument("--partition-hours", type=float, default=24.0)
    p.add_argument("--retention-days", type=float, default=7.0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m idempotent_consumer")
    sub = parser.add_subparsers(dest="command", required=True)
    schema = sub.add_parser("schema", help="create the PostgreSQL table, functions, partitions")
    _store_args(schema)
    schema.add_argument("--print", action="store_true", help="print the SQL, change nothing")
    maintain = sub.add_parser("maintain", help="create next partitions, drop expired ones")
    _store_args(maintain)
    sizing = sub.add_parser("sizing", help="slots for the bounded memory store")
    sizing.add_argument("--catch", type=float, default=0.9, help="share of repeats to catch")
    sizing.add_argument("--after", type=int, required=True, help="messages between the copies")
    args = parser.parse_args(argv)

    if args.command == "sizing":
        n = slots_for(args.catch, args.after)
        print(f"slots={n} catch_rate={catch_rate(n, args.after):.4f} after={args.after}")
        return 0

    from .postgres import PostgresStore

    store = PostgresStore(
        args.dsn or "",
        table=args.table,
        partition_period=timedelta(hours=args.partition_hours),
        retention=timedelta(days=args.retention_days),
    )
    if args.command == "schema" and args.print:
        print(store.schema_sql())
        return 0
    if not args.dsn:
        parser.error("--dsn is required")
    report = store.create() if args.command == "schema" else store.maintain()
    print(
        f"{args.table}: created {report.created or 'no partitions'}, "
        f"dropped {report.dropped or 'none'}" + (" (skipped: busy)" if report.skipped else "")
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
