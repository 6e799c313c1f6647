"""Recovery benchmark: how long a worker with an empty data dir takes to rebuild its state from
the changelog with the bulk restorer, against a bare read of the same changelog, in one session.

    python -m bench.recovery                        # 10,000,000 ids over 4 partitions
    python -m bench.recovery --ids 50000000 --skip-quix
    make bench-recovery BENCH_RECOVERY_ARGS="--ids 1000000"     # a quick run
    python -m bench.recovery --uuids --skip-quix    # random UUID-shaped ids

Quix Streams' fill and rebuild take most of a run at the default 10M ids (``--skip-quix`` leaves
them out).

Needs a broker (``make bench-recovery`` starts one on 127.0.0.1:29092 unless
``KAFKA_BOOTSTRAP_SERVERS`` is set). It writes a ``seen_ids`` changelog of ``--ids`` ids the
way the worker's transactions do (one transactional producer per partition, ``--txn`` records per
transaction, each id on the partition the worker's partitioner gives it, values encoded as the
store's entries), then starts the real worker (``python -m app worker``) on an empty data dir and
times it from process start to ``GET /ready`` = 200:

- ``startup``: an app whose changelog is empty (the fixed cost of starting a worker);
- ``bulk``: the bulk restorer (``recovery/restore.py``);
- ``restart``: the bulk run's worker stopped (SIGTERM) and started again on its data dir: only
  the tail after the offset the store holds (nothing) is read;
- ``from-snapshot``: while the restarted worker runs, ``python -m app snapshot`` (timed, size per
  id), then ``python -m app restore`` into a new data dir (timed) and a worker started on it;
- ``quix``: Quix Streams (``bench/contenders/quix_dedup.py``, the throughput benchmark's
  exactly-once contender) deduplicates every id once, which fills its changelog, then starts
  on an empty state dir and rebuilds it (skip with ``--skip-quix``: it fills at some 30,000
  ids/s);
- ``kstreams``: Kafka Streams (``bench/contenders/kstreams_dedup.py``, the throughput
  benchmark's contender (g), exactly_once_v2) the same way: fills its changelog, then restores
  its window store on an empty state dir (RocksDB write batches with the WAL off), timed by its
  own restore listener (skip with ``--skip-kstreams``);
- standby takeover: a second worker with ``DEDUPE_STANDBY_REPLICAS=1`` joins the restarted one,
  and once its standby copies are caught up the first is killed (kill -9): seconds from the
  kill until the second is ready with every partition (the session timeout included), and the
  changelog offsets it restored.

Beside them, in the bench's process, writing nothing: ``limit``, a bare aiokafka consumer
(``read_committed``, the restorer's fetch sizes) reading the same changelog, the issue's limit;
and ``reader``, the restorer's own reader (``recovery/reader.py``), its ceiling.

Restore seconds are the time to ready minus ``startup``; records/s are ids over those seconds
(the bulk restorer's own figure, from its log, is printed too). The data dir's bytes per id are
taken after the bulk restore. Results are printed and written to bench/results-recovery.md.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from app.settings import Settings
from bench.contender_process import free_port
from bench.measure import disk_bytes
from bench.recovery_changelog import (
    ROOT,
    bare_read,
    batch_read,
    changelog_bytes,
    ids_for,
    write_changelog,
)
from bench.recovery_peers import kstreams_recovery, quix_recovery
from bench.recovery_procs import (
    SESSION_TIMEOUT,
    STARTED,
    app_command,
    logged_rate,
    ready_after,
    standby_takeover,
    stop,
    worker_env,
)
from bench.recovery_report import Run, render
from bench.results_file import write_latest

RESULTS = Path(__file__).with_name("results-recovery.md")
METHOD = (
    "`make bench-recovery` (`python -m bench.recovery`; bench/recovery.py's docstring and "
    "docs/benchmarks.md): a changelog written as the worker's transactions write it, then the "
    "real worker started on an empty data dir and timed to `GET /ready`. The bulk restore is "
    "the worker's one way to rebuild state; `limit` is the bound it is measured against."
)
TARGET = (
    "the bulk restore as close to `limit` (a bare read_committed consumer reading the same "
    "changelog) as it can get; a change must not make it slower, measured A/B back to back on "
    "one machine (figures of different machines differ; the ratios to `limit` of one run "
    "compare)."
)
DATA_ROOT = ROOT / "data" / "bench-recovery"


def run(args: argparse.Namespace) -> tuple[list[Run], dict[str, float]]:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    tag = f"benchrec-{int(time.time())}"
    root = DATA_ROOT / tag
    root.mkdir(parents=True, exist_ok=True)
    by_partition = ids_for(args.ids, args.partitions, args.uuids)
    # Millions of ids held here for the whole run: without this, every collection of the
    # oldest generation walked them, and the ``limit`` read below (records as objects) ran at a
    # third of the speed it has in a fresh process at 10M ids (178,396 against 478,687/s) and
    # at a sixth at 50M (72,950 against 467,992/s).
    gc.freeze()
    changelog = f"{tag}-seen_ids-changelog"
    asyncio.run(write_changelog(bootstrap, changelog, by_partition, args.txn, args.compression))
    runs = [
        Run("limit", None, asyncio.run(bare_read(bootstrap, changelog, args.partitions))),
        Run("reader", None, asyncio.run(batch_read(bootstrap, changelog, args.partitions))),
    ]

    def start(
        mode: str, app_id: str, data: Path, **extra: str
    ) -> tuple[float, subprocess.Popen[bytes], int]:
        port = free_port()
        env = worker_env(bootstrap, app_id, args.partitions, data, port, args.session_timeout)
        env.update(extra)
        ready_s, proc = ready_after(env, port, log_of(mode), args.timeout)
        print(f"{mode}: ready after {ready_s:.1f}s", flush=True)
        return ready_s, proc, port

    def log_of(mode: str) -> Path:
        return root / f"worker-{mode}.log"

    ready_s, proc, _ = start("startup", f"{tag}-empty", root / "startup")
    stop(proc)
    base = ready_s
    runs.append(Run("startup", ready_s))
    ready_s, proc, _ = start("bulk", tag, root / "bulk")
    stop(proc)
    runs.append(Run("bulk", ready_s, ready_s - base, logged_rate(log_of("bulk"))))
    sizes = {"data dir bytes per id": disk_bytes(root / "bulk") / args.ids}
    on_broker = changelog_bytes(bootstrap, changelog)
    if on_broker is not None:
        sizes["changelog bytes per id"] = on_broker / args.ids
    # Standbys on (a second worker follows), which changes nothing for one worker alone.
    ready_s, proc, port = start("restart", tag, root / "bulk", DEDUPE_STANDBY_REPLICAS="1")
    runs.append(Run("restart", ready_s, ready_s - base))
    # A snapshot of the running worker, restored into a new data dir, and a start on it.
    env = worker_env(
        bootstrap, tag, args.partitions, root / "bulk", free_port(), args.session_timeout
    )
    sizes["snapshot seconds"] = app_command(env, "snapshot", "--to", str(root / "snapshot"))
    # A second worker with standbys joins; the first is killed once they are caught up.
    second_port = free_port()
    env = worker_env(
        bootstrap, tag, args.partitions, root / "standby", second_port, args.session_timeout
    )
    env.update(DEDUPE_STANDBY_REPLICAS="1")
    took, replayed = standby_takeover(
        proc, port, env, second_port, root / "worker-standby.log", args.partitions, args.timeout
    )
    print(f"standby takeover: ready {took:.1f}s after the kill, {replayed:,} offsets restored")
    sizes["takeover seconds"], sizes["takeover offsets"] = took, replayed
    sizes["session timeout"] = args.session_timeout
    sizes["snapshot bytes per id"] = disk_bytes(root / "snapshot") / args.ids
    env = worker_env(
        bootstrap, tag, args.partitions, root / "restored", free_port(), args.session_timeout
    )
    sizes["restore seconds"] = app_command(env, "restore", "--from", str(root / "snapshot"))
    ready_s, proc, _ = start("from-snapshot", tag, root / "restored")
    stop(proc)
    runs.append(Run("from-snapshot", ready_s, ready_s - base))
    if not args.skip_quix:
        recovery, _total = quix_recovery(bootstrap, tag, by_partition, root, args.timeout)
        runs.append(Run("quix", None, recovery))
    if not args.skip_kstreams:
        recovery, _total = kstreams_recovery(bootstrap, tag, by_partition, root, args.timeout)
        runs.append(Run("kstreams", None, recovery))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return runs, sizes


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--ids", type=int, default=10_000_000, help="ids in the changelog (10,000,000)"
    )
    parser.add_argument(
        "--uuids",
        action="store_true",
        help="random UUID-shaped ids, as SDKs send them (default: numbered ids, in key order)",
    )
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--txn", type=int, default=10_000, help="records per transaction")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to ready, at most")
    parser.add_argument(
        "--skip-quix", action="store_true", help="no Quix Streams recovery run (some 30k ids/s)"
    )
    parser.add_argument(
        "--skip-kstreams", action="store_true", help="no Kafka Streams recovery run"
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=SESSION_TIMEOUT,
        help=f"the workers' DEDUPE_SESSION_TIMEOUT, seconds ({SESSION_TIMEOUT:g}; the takeover "
        "includes it)",
    )
    parser.add_argument(
        "--compression",
        default=Settings.from_env({}).changelog_compression,
        help="the changelog's batch compression (default: the worker's "
        "DEDUPE_CHANGELOG_COMPRESSION default, as a worker writes it)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cmdline = "python -m bench.recovery " + " ".join(argv if argv is not None else sys.argv[1:])
    try:
        runs, sizes = run(args)
    finally:
        for proc in STARTED:
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
    text = render(args, runs, sizes, cmdline.strip())
    print(text)
    write_latest(RESULTS, "Recovery benchmark results", METHOD, TARGET, text)


if __name__ == "__main__":
    main()
