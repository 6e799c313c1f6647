"""Contender benchmark: the same de-duplication job on the same broker, data and partitions.

    make bench                                    # 2,000,000 events per profile, all contenders
    python -m bench.throughput --events 200000    # smaller
    python -m bench.throughput --contenders a,b --profiles dup20
    python -m bench.throughput --events 500000 --runs 3   # the published run: medians of 3
    python -m bench.throughput --contenders b --events 100000 --py-spy data/profile  # profile (b)

Contenders, one at a time, each a subprocess (so its process tree can be measured):

- (a) ``bench.contenders.copy_eos``: transactional consume -> produce copy, no dedup (the limit);
- (b) our worker, ``python -m app worker`` (exactly-once, the default);
- (d) ``bench.contenders.quix_dedup`` (Quix Streams), (e) ``bench.contenders.spark_dedup``
  (Spark ``dropDuplicatesWithinWatermark``, on ``local[2]``: two cores);
- (f) our exactly-once worker as two processes in one consumer group
  (``bench.contenders.worker_group``), one per core as Spark has them: (b) is one Python
  process, so one core;
- (g) ``bench.contenders.kstreams_dedup``: Kafka Streams (exactly_once_v2, a RocksDB window
  store, one stream thread), the Java application in ``bench/contenders/kstreams/`` built
  with Maven on its first run; (h) ``bench.contenders.kstreams_kv_dedup``: the same
  application on a key-value store whose expired ids a punctuator deletes. Rounds of a few
  seconds sit inside the JVM's warm-up: for Kafka Streams, compare rounds of millions of events
  (``--events 5000000``).

A contender whose module is missing, which exits early or does not finish is recorded as failed
or incomplete, with its error, and the run goes on.

Data. For each profile (``dup0.6``: 0.6% of the records are repeats, ``dup20``: 20%; and for our
worker's other strategies ``ps20``, producer sequences, and ``fp20``, events without a messageId
deduplicated by fingerprint, each with 20% repeats: see ``PROFILES``) N records
(``--events``/``BENCH_EVENTS``) are generated deterministically (``scripts.streams.make_event``:
~300-byte Segment-style JSON, key = messageId, Kafka's default partitioner): N minus the repeats
unique events, and each repeat a byte-identical copy of an earlier event, half of them right
after it, half 1,000 to 10,000 records later. Every copy is keyed (no null keys, which only our
worker re-keys). Before each contender starts, the same records are produced, in the same order,
into that contender's own input topic with ``--partitions`` partitions (a contender must never
read another one's latency-phase records), while nothing else runs.

Measures, per contender and profile:

- **events/s sustained**: N / (time the last new id appeared in the output - time the first
  output record appeared), i.e. start-up and the wait for the first commit are excluded. The
  output is watched by a ``read_committed`` consumer in this process; it is complete when every
  unique id of the input is there (and, for the copy, every record). "incl. start-up" is N /
  (complete - process start).
- **latency p50/p99**: after the backlog is done, ``--latency-events`` new unique events are
  produced at a steady ``--latency-rate`` per second (``linger.ms=0``, ``acks=all``); the send
  time of each is taken just before ``send()`` and its arrival time when the ``read_committed``
  consumer receives it, on the same clock. Latency = arrival - send: produce, the contender's
  processing and its commit, and the fetch. Events that never arrive count in "latency missing".
- **peak RSS**: the largest sum of VmRSS over the contender's process tree (the process and
  every descendant, e.g. Spark's JVM), sampled from /proc every 0.5 s.
- **CPU s / 1M events**: user + system CPU of the process tree (/proc/<pid>/stat utime + stime,
  each pid's last value kept when it exits) from process start until the output was complete,
  start-up included, per million input records.
- **disk B / id**: bytes on disk (allocated blocks) of the contender's state dir after it
  stopped (SIGTERM, then SIGKILL after 60 s), divided by the unique ids it stored (backlog +
  latency events). Kafka changelog topics are not counted.
- **correctness**: after the contender stopped, the whole output topic as a ``read_committed``
  reader sees it: records, distinct ids, ids missing, repeats that leaked, unknown ids.

With ``--runs N`` the whole benchmark runs N times over (every profile and contender, then
again) and each row shows the median of each figure over the rounds; a ratio between two
contenders is taken within each round, then the median of those (``bench/rounds.py``; the
notes give each round's throughput and p99). The targets are judged on three rounds: one
contender's throughput moves by a third between back-to-back runs on two shared cores.

The watcher, the producer and the contender share the machine's cores; the broker too. Every
run rewrites ``bench/results.md`` and ``bench/results.png``. Topics of a contender are deleted
after its run (``--keep-topics`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import sys
from datetime import UTC, datetime
from pathlib import Path

from app.admin.capacity.figures import refresh
from bench.contender_data import PROFILE_KINDS, PROFILES
from bench.contender_process import Options
from bench.contender_run import Run
from bench.machine import machine, versions
from bench.report import (
    CONTENDERS,
    COPY_FLOORS,
    WORKERS,
    Result,
    render_table,
    targets,
    write_chart,
)
from bench.rounds import combine

ROOT = Path(__file__).resolve().parent.parent
#: The worker's default commit interval (DEDUPE_COMMIT_INTERVAL); the p99 target builds on it.
COMMIT_INTERVAL = 0.1


def broker_shape(opts: Options) -> str:
    brokers = len(opts.bootstrap.split(","))
    if brokers == 1 and opts.replication == 1:
        return "a single-node broker"
    return f"{brokers} brokers, every topic with replication {opts.replication}"


def render(
    cmdline: str, opts: Options, results: dict[str, list[Result]], started: datetime, rounds: int
) -> str:
    each = (
        f" Each figure is the median over {rounds} rounds; each ratio the median of the ratios "
        "within a round."
        if rounds > 1
        else ""
    )
    lines = [
        "# Contender benchmark",
        "",
        f"Generated by `{cmdline}` on {started:%Y-%m-%d %H:%M} UTC "
        f"(run `{opts.run_id}`); method in the docstring of "
        "[bench/throughput.py](throughput.py). Every contender ran alone, as a subprocess, on "
        f"the same local Kafka ({broker_shape(opts)}), with {opts.partitions} partitions and "
        "the same input records." + each,
        "",
        "Machine: " + ", ".join(machine()) + ".",
        "",
        "Versions: " + ", ".join(versions()) + ".",
        "",
        f"Latency phase: {opts.latency_events:,} new unique events at "
        f"{opts.latency_rate:g}/s after the backlog, produce time -> visible to a "
        "`read_committed` consumer.",
        "",
        f"![throughput and p99 per contender]({opts.chart_name})",
    ]
    for profile, rows in results.items():
        r0 = rows[0] if rows else None
        unique = next((r.unique for r in rows if r.unique), 0)
        lines += [
            "",
            f"## Profile {profile}: {opts.events:,} records, {unique:,} unique, "
            f"{opts.events - unique:,} repeats ({PROFILES[profile][1]:.1%}; "
            f"{PROFILE_KINDS[PROFILES[profile][0]]})",
            "",
            render_table(rows),
            "",
            "Targets for our exactly-once worker (b):",
            "",
            *(
                f"- {t}"
                for t in targets(
                    rows,
                    COMMIT_INTERVAL,
                    COPY_FLOORS.get(profile, 1.0),
                    replicated=opts.replication > 1,
                )
            ),
        ]
        notes = [f"- {r.label}: {n}" for r in rows for n in r.notes]
        if notes and r0 is not None:
            lines += ["", "Notes:", "", *notes]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--events",
        type=int,
        default=int(os.environ.get("BENCH_EVENTS", "2000000")),
        help="records per profile (BENCH_EVENTS; default 2,000,000)",
    )
    p.add_argument(
        "--contenders",
        default=",".join(CONTENDERS),
        help=f"which of {','.join(CONTENDERS)} (default all)",
    )
    p.add_argument(
        "--profiles", default=",".join(PROFILES), help=f"{','.join(PROFILES)} (default all)"
    )
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument(
        "--runs",
        type=int,
        default=1,
        help="rounds of the whole benchmark; each figure the median over them (default 1)",
    )
    p.add_argument(
        "--replication",
        type=int,
        default=1,
        help="replication factor of every topic (3 on a three-broker cluster: make bench-cluster)",
    )
    p.add_argument(
        "--bootstrap",
        default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092"),
        help="Kafka bootstrap servers (KAFKA_BOOTSTRAP_SERVERS; default 127.0.0.1:29092)",
    )
    p.add_argument("--latency-events", type=int, default=3000)
    p.add_argument("--latency-rate", type=float, default=500.0, help="events per second")
    p.add_argument("--start-timeout", type=float, default=300.0, help="seconds to first output")
    p.add_argument("--idle-timeout", type=float, default=120.0, help="seconds without new ids")
    p.add_argument("--work-dir", type=Path, default=ROOT / "data" / "bench")
    p.add_argument("--results", type=Path, default=ROOT / "bench" / "results.md")
    p.add_argument("--chart", type=Path, default=ROOT / "bench" / "results.png")
    p.add_argument("--keep-topics", action="store_true")
    p.add_argument(
        "--py-spy",
        type=Path,
        default=None,
        metavar="DIR",
        help="profile the worker contenders (b, c, f) with py-spy until their backlog is done: "
        "DIR/<profile>-<key>.folded (collapsed stacks) and .txt (summary, bench.profile); "
        "py-spy shares the cores, so profiled figures are not for comparison",
    )
    p.add_argument(
        "--worker-setting",
        action="append",
        default=[],
        metavar="DEDUPE_NAME=VALUE",
        help="a setting for the worker contenders (b, c), e.g. DEDUPE_COMMIT_INTERVAL=250ms "
        "(repeatable; the settings that name topics, partitions and dirs are the harness's)",
    )
    args = p.parse_args(argv)
    worker_settings: dict[str, str] = {}
    for item in args.worker_setting:
        name, sep, value = item.partition("=")
        if not sep or not name.startswith("DEDUPE_"):
            p.error(f"--worker-setting {item!r}: use DEDUPE_NAME=VALUE")
        worker_settings[name] = value
    args.worker_settings = worker_settings
    keys = [k.strip() for k in args.contenders.split(",") if k.strip()]
    bad = [k for k in keys if k not in CONTENDERS]
    if bad:
        p.error(f"unknown contenders {bad}; use any of {','.join(CONTENDERS)}")
    profiles = [x.strip() for x in args.profiles.split(",") if x.strip()]
    if not profiles or any(x not in PROFILES for x in profiles):
        p.error(f"profiles must be among {','.join(PROFILES)}")
    if args.runs < 1:
        p.error("--runs must be at least 1")
    if args.events < 1000:
        p.error("--events must be at least 1000")
    args.contender_keys = keys
    args.profile_names = profiles
    return args


async def main_async(args: argparse.Namespace, cmdline: str) -> None:
    opts = Options(
        bootstrap=args.bootstrap,
        events=args.events,
        partitions=args.partitions,
        latency_events=args.latency_events,
        latency_rate=args.latency_rate,
        start_timeout=args.start_timeout,
        idle_timeout=args.idle_timeout,
        work_dir=args.work_dir,
        keep_topics=args.keep_topics,
        py_spy=args.py_spy,
        worker_settings={
            "DEDUPE_REPLICATION_FACTOR": str(args.replication),
            **args.worker_settings,
        },
        replication=args.replication,
        chart_name=args.chart.name,
    )
    started = datetime.now(UTC)
    print(
        f"bench {opts.run_id}: {opts.events:,} records x profiles {args.profile_names} x "
        f"contenders {args.contender_keys} x {args.runs} rounds on {opts.bootstrap}",
        flush=True,
    )
    # rounds[profile]: one list of results per round.
    rounds: dict[str, list[list[Result]]] = {p: [] for p in args.profile_names}

    def write(done: int) -> dict[str, list[Result]]:
        """The results file over the first ``done`` rounds (the first one also as it goes)."""
        results = {p: combine(r[:done]) for p, r in rounds.items() if r}
        args.results.write_text(render(cmdline, opts, results, started, done))
        return results

    for n in range(args.runs):
        for profile in args.profile_names:
            rounds[profile].append([])
            kind, dup_fraction = PROFILES[profile]
            for key in args.contender_keys:
                if kind != "id" and key not in WORKERS:
                    continue  # only our worker has this strategy
                run = Run(opts, profile, key, n)
                print(f"== round {n + 1}: {profile} / {CONTENDERS[key][1]}", flush=True)
                try:
                    result = await run.run(kind, dup_fraction)
                except Exception as exc:  # the harness records a broken run and goes on
                    result = run.result
                    result.status = "failed"
                    result.error = f"harness: {exc!r}"[:300]
                    print(f"  [{key}] {profile}: {result.error}", flush=True)
                rounds[profile][-1].append(result)
                if n == 0:
                    write(1)
        results = write(n + 1)
    for name in refresh(args.results):
        print(f"app/admin/capacity/figures.json: {name} taken from {args.results.name}")
    write_chart(args.chart, results)
    print(f"wrote {args.results} and {args.chart}", flush=True)
    for profile, rows in results.items():
        print(f"\n{profile}\n{render_table(rows)}")


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    shown = " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    cmdline = f"python -m bench.throughput {shown}".strip()
    if "BENCH_EVENTS" in os.environ:
        cmdline = f"BENCH_EVENTS={os.environ['BENCH_EVENTS']} {cmdline}"
    asyncio.run(main_async(args, cmdline))


if __name__ == "__main__":
    main()
