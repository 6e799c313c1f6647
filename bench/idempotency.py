"""Idempotency benchmark: claims/s and p99 per store, beside the bare operation on the same
server in the same run, and beside Powertools' idempotency on the same Redis.

    make bench-idempotency                              # servers up, then the defaults below
    python -m bench.idempotency                         # 3 runs x 4,000 ids per contender
    python -m bench.idempotency --ids 1000 --runs 1     # quicker

Needs the PostgreSQL and Redis of ``scripts/servers.sh up`` (``--dsn`` / ``--redis-url`` for
others). Each contender runs two phases on fresh ids: *new* (the first claim of each id and
its completion, as a consumer's first delivery) and *repeat* (the same ids again: a
redelivery, answered from the record). One operation is timed from the call to the result.
Every claim hashes the event as its payload, ours and Powertools' alike
(``bench/idem_contenders.py``):

- ``pg bare INSERT``: ``INSERT ... ON CONFLICT DO NOTHING`` of the id alone (autocommit): the
  floor of any PostgreSQL claim. ``pg claim``: ``PostgresStore`` claim + complete, each its
  own statement and commit. ``pg claim joined``: the claim and its completion in one
  transaction on the caller's connection (BEGIN, claim, complete, COMMIT: where an effect
  written on that connection would commit with them);
- ``redis bare SET NX``: ``SET id 1 NX PX``. ``redis claim``: ``RedisStore`` (``SET NX GET PX``
  + the complete script). ``powertools redis validated`` / ``keyed by event``:
  aws-lambda-powertools' ``idempotent_function`` with its Redis persistence layer
  (``CachePersistenceLayer``) on the same server, outside Lambda (no lambda context: its
  in-progress lease is absent and it warns once), the event hashed for payload validation
  (its repeats are all refused: ``bench/idem_contenders.powertools_op`` says why, and the
  results count them) or hashed as the key;
- ``memory claim``: ``MemoryStore`` (in-process, no server);
- ``async x16`` rows: the same claims from 16 asyncio tasks on a pool (PostgreSQL) or one
  client (Redis), beside the bare operation at the same concurrency.

Sequential rows use one connection and one thread, so they measure round trips and commits.
Within a run the contenders take turns in chunks of ``--chunk`` ids (``bench/idem_run.py``);
the whole run is repeated ``--runs`` times (3) on fresh tables, and each figure is the median
of the runs with their spread (min-max); a ratio to the bare row is taken within each run
(same minute, same disk) and then its median. The persistence settings of both servers are
read from them (``SHOW``, ``CONFIG GET``) and printed with the results, which are written to
bench/results-idempotency.md.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

import psycopg
import redis

from bench.idem_contenders import CONCURRENCY, REFUSED, Row
from bench.idem_run import Run
from bench.results_file import write_latest

RESULTS = Path(__file__).with_name("results-idempotency.md")
METHOD = (
    "`make bench-idempotency` (`python -m bench.idempotency`; its docstring and "
    "docs/benchmarks.md): every contender on the same servers, in turns, new ids then repeats, "
    "each claim hashing its payload; three runs, the median and the spread (min-max)."
)
TARGET = (
    "a claim's cost next to the bare write it wraps (INSERT, SET NX) on the same server in the "
    "same run; a change must not make it slower, measured back to back."
)
RATIOS = (
    ("pg claim", "pg bare INSERT"),
    ("pg claim joined", "pg bare INSERT"),
    ("redis claim", "redis bare SET NX"),
    ("redis claim", "powertools redis validated"),
    ("redis claim", "powertools redis keyed by event"),
    (f"pg claim (async x{CONCURRENCY})", f"pg bare INSERT (async x{CONCURRENCY})"),
    (f"redis claim (async x{CONCURRENCY})", f"redis bare SET NX (async x{CONCURRENCY})"),
)


def spread(values: list[float], fmt: str = ",.0f") -> str:
    """``median (min-max)`` of the runs' figures; the median alone for one run."""
    med = format(statistics.median(values), fmt)
    if len(values) == 1:
        return med
    return f"{med} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def per_run(runs: list[dict[str, Row]], name: str, get: Callable[[Row], float]) -> list[float]:
    return [get(rows[name]) for rows in runs if name in rows]


def ratio_spread(runs: list[dict[str, Row]], a: str, b: str, phase: str) -> str:
    values = [
        getattr(rows[a], phase).rate / getattr(rows[b], phase).rate
        for rows in runs
        if a in rows and b in rows and getattr(rows[b], phase).rate
    ]
    return spread(values, ".2f").replace(" (", "x (") + ("" if len(values) > 1 else "x")


def render(runs: list[dict[str, Row]]) -> str:
    lines = [
        "| contender | server | new ids: claims/s | p50 ms | p99 ms | repeats: claims/s "
        "| p99 ms | new vs bare | repeats vs bare |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in runs[0].items():
        vs_new = ratio_spread(runs, name, row.bare, "new") if row.bare else ""
        vs_rep = ratio_spread(runs, name, row.bare, "repeat") if row.bare else ""
        cells = [
            spread(per_run(runs, name, lambda r: r.new.rate)),
            spread(per_run(runs, name, lambda r: r.new.p(50)), ".2f"),
            spread(per_run(runs, name, lambda r: r.new.p(99)), ".2f"),
            spread(per_run(runs, name, lambda r: r.repeat.rate)),
            spread(per_run(runs, name, lambda r: r.repeat.p(99)), ".2f"),
        ]
        lines.append(f"| {name} | {row.server} | {' | '.join(cells)} | {vs_new} | {vs_rep} |")
    return "\n".join(lines)


def ratios(runs: list[dict[str, Row]]) -> list[str]:
    return [
        f"- {a} / {b}: new ids {ratio_spread(runs, a, b, 'new')}, "
        f"repeats {ratio_spread(runs, a, b, 'repeat')}"
        for a, b in RATIOS
    ]


def server_settings(dsn: str, redis_url: str) -> str:
    """What decides durability and commit cost, as each server reports it."""
    with psycopg.connect(dsn) as conn:
        pg = {
            name: str(row[0]) if (row := conn.execute(f"SHOW {name}").fetchone()) else "?"
            for name in ("server_version", "fsync", "synchronous_commit", "wal_sync_method")
        }
    client = redis.Redis.from_url(redis_url)
    version = client.info("server")["redis_version"]
    config: dict[str, str] = {}
    for name in ("appendonly", "appendfsync", "save", "maxmemory-policy"):
        raw = client.config_get(name)
        config[name] = raw.get(name, "?") if isinstance(raw, dict) else "?"
    client.close()
    redis_settings = ", ".join(f'{k} "{v}"' for k, v in config.items())
    return (
        f"PostgreSQL {pg['server_version']} (fsync {pg['fsync']}, synchronous_commit "
        f"{pg['synchronous_commit']}, wal_sync_method {pg['wal_sync_method']}); Redis "
        f"{version} (CONFIG GET: {redis_settings})"
    )


def machine() -> str:
    cpu = "?"
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    versions = ", ".join(
        f"{n} {metadata.version(n)}"
        for n in ("psycopg", "redis", "aws-lambda-powertools", "idempotent-consumer")
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores ({cpu}); Python "
        f"{platform.python_version()}, {versions}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ids", type=int, default=4_000, help="ids per contender (4,000)")
    parser.add_argument("--chunk", type=int, default=250, help="ids per turn (250)")
    parser.add_argument("--runs", type=int, default=3, help="whole runs, each fresh (3)")
    parser.add_argument("--dsn", default="postgresql://postgres@127.0.0.1:15432/postgres")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:16379/0")
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    started = time.monotonic()
    runs: list[dict[str, Row]] = []
    for k in range(args.runs):
        run = Run(args.dsn, args.redis_url, args.ids)
        try:
            runs.append(run.run(args.chunk))
        finally:
            run.cleanup()
        done = ", ".join(f"{n} {r.new.rate:,.0f}/{r.repeat.rate:,.0f}" for n, r in runs[-1].items())
        print(f"run {k + 1}/{args.runs} (new/repeat claims/s): {done}", flush=True)
    took = time.monotonic() - started
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    command = (
        f"python -m bench.idempotency --ids {args.ids} --chunk {args.chunk} --runs {args.runs}"
    )
    section = "\n".join(
        [
            f"## {when} `{command}`",
            "",
            machine(),
            "",
            server_settings(args.dsn, args.redis_url),
            "",
            f"Each cell: the median of {args.runs} runs (min-max).",
            "",
            render(runs),
            "",
            "Ratios (claims/s, same server, within each run; median (min-max)):",
            "",
            *ratios(runs),
            "",
            f"{args.ids:,} ids per contender and phase per run, in turns of {args.chunk}; "
            f"{args.runs} runs took {took:.0f} s.",
            "",
            *(
                f"{name}: {count:,} of {args.ids * args.runs:,} repeats refused with "
                "IdempotencyValidationError (the hash its Redis layer dropped on completion)."
                for name, count in sorted(REFUSED.items())
            ),
            "",
        ]
    )
    print(section)
    if not args.no_write:
        write_latest(
            RESULTS, "Idempotency benchmark: claims/s and p99 per store", METHOD, TARGET, section
        )
        print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
