"""Recovery benchmark: how long a worker with an empty data dir takes to rebuild its state from
the changelog, with Faust's per-record recovery and with the bulk restorer, in one session.

    python -m bench.recovery                        # 1,000,000 ids over 4 partitions
    python -m bench.recovery --ids 5000000 --skip-faust
    make bench-recovery BENCH_RECOVERY_ARGS="--ids 2000000"

Needs a broker (``make bench-recovery`` starts one on 127.0.0.1:39092 unless
``KAFKA_BOOTSTRAP_SERVERS`` is set). It writes a ``seen_ids`` changelog of ``--ids`` ids the
way the worker's transactions do (one transactional producer per partition, ``--txn`` records per
transaction, each id on the partition the worker's partitioner gives it, values encoded as the
store's entries), then starts the real worker (``python -m app worker``) on an empty data dir and
times it from process start to ``GET /ready`` = 200:

- ``startup``: an app whose changelog is empty (the fixed cost of starting a worker);
- ``faust``: ``DEDUPE_BULK_RESTORE=false``, Faust's per-record recovery (skip with
  ``--skip-faust`` for large ``--ids``: some 10,000 records/s);
- ``bulk``: the bulk restorer (``tables/restore.py``);
- ``restart``: the bulk run's worker stopped (SIGTERM) and started again on its data dir: only
  the tail after the offset the store holds (nothing) is read.

Restore seconds are the time to ready minus ``startup``; records/s are ids over those seconds
(the bulk restorer's own figure, from its log, is printed too). The data dir's bytes per id are
taken after the bulk restore. Results are printed and appended to bench/results-recovery.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.rules import partition_for
from bench.measure import disk_bytes
from bench.throughput import free_port, machine, versions
from tables.window import encode_entry

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results-recovery.md")
DATA_ROOT = ROOT / "data" / "bench-recovery"
T0 = 1_790_000_000_000
RESTORED = re.compile(r"restored \S+ through offset \d+: (\d+) records in ([\d.]+)s")


@dataclass
class Run:
    mode: str
    ready_s: float
    restore_s: float | None = None
    logged_rate: float | None = None

    def rate(self, ids: int) -> float | None:
        if self.restore_s is None or self.restore_s <= 0:
            return None
        return ids / self.restore_s


def ids_for(count: int, partitions: int) -> dict[int, list[bytes]]:
    """``count`` distinct 36-character ids, on the partitions the worker's partitioner gives."""
    by: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(count):
        key = f"{i:08x}-bench-4000-8000-{i * 2654435761 % (1 << 48):012x}".encode()
        by[partition_for(key, partitions)].append(key)
    return by


async def write_changelog(
    bootstrap: str, topic: str, by_partition: dict[int, list[bytes]], per_txn: int
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        config = {"cleanup.policy": "compact"}
        await admin.create_topics([NewTopic(topic, len(by_partition), 1, topic_configs=config)])
    finally:
        await admin.close()
    started = time.monotonic()
    seq = 0
    for partition, keys in sorted(by_partition.items()):
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            transactional_id=f"{topic}-writer-{partition}",
            linger_ms=5,
            max_batch_size=1 << 20,
        )
        await producer.start()
        try:
            for i in range(0, len(keys), per_txn):
                async with producer.transaction():
                    for key in keys[i : i + per_txn]:
                        value = encode_entry(T0 + seq, seq)
                        seq += 1
                        await producer.send(topic, value, key=key, partition=partition)
        finally:
            await producer.stop()
    print(f"changelog written: {seq:,} records in {time.monotonic() - started:.1f}s", flush=True)


def ready_after(
    env: dict[str, str], port: int, log: Path, timeout: float
) -> tuple[float, subprocess.Popen[bytes]]:
    """Start the worker; seconds until /ready answers 200, and the (running) process."""
    with log.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "-l", "info"],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as reply:
                if reply.status == 200 and json.loads(reply.read())["partitions"]:
                    return time.monotonic() - started, proc
        except OSError:
            pass
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the worker was not ready after {timeout}s; see {log}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def worker_env(
    bootstrap: str, app_id: str, partitions: int, data: Path, port: int
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")}
    env.update(
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        DEDUPE_APP_ID=app_id,
        DEDUPE_INPUT_TOPIC=f"{app_id}-in",
        DEDUPE_OUTPUT_TOPIC=f"{app_id}-out",
        DEDUPE_DLQ_TOPIC=f"{app_id}-dlq",
        DEDUPE_PARTITIONS=str(partitions),
        DEDUPE_DATA_DIR=str(data),
        DEDUPE_WEB_PORT=str(port),
        DEDUPE_SESSION_TIMEOUT="6s",
    )
    return env


def logged_rate(log: Path) -> float | None:
    """The bulk restorer's own rate: records over the sum of its restore times."""
    found = RESTORED.findall(log.read_text(errors="replace"))
    seconds = sum(float(s) for _, s in found)
    return sum(int(n) for n, _ in found) / seconds if found and seconds > 0 else None


def run(args: argparse.Namespace) -> tuple[list[Run], float]:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:39092")
    tag = f"benchrec-{int(time.time())}"
    root = DATA_ROOT / tag
    root.mkdir(parents=True, exist_ok=True)
    by_partition = ids_for(args.ids, args.partitions)
    asyncio.run(write_changelog(bootstrap, f"{tag}-seen_ids-changelog", by_partition, args.txn))
    runs: list[Run] = []

    def start(
        mode: str, app_id: str, data: Path, **extra: str
    ) -> tuple[float, subprocess.Popen[bytes], Path]:
        port = free_port()
        env = worker_env(bootstrap, app_id, args.partitions, data, port)
        env.update(extra)
        log = root / f"worker-{mode}.log"
        ready_s, proc = ready_after(env, port, log, args.timeout)
        print(f"{mode}: ready after {ready_s:.1f}s", flush=True)
        return ready_s, proc, log

    ready_s, proc, _ = start("startup", f"{tag}-empty", root / "startup")
    stop(proc)
    base = ready_s
    runs.append(Run("startup", ready_s))
    if not args.skip_faust:
        ready_s, proc, _ = start("faust", tag, root / "faust", DEDUPE_BULK_RESTORE="false")
        stop(proc)
        runs.append(Run("faust", ready_s, ready_s - base))
        shutil.rmtree(root / "faust", ignore_errors=True)
    ready_s, proc, log = start("bulk", tag, root / "bulk")
    stop(proc)
    runs.append(Run("bulk", ready_s, ready_s - base, logged_rate(log)))
    per_id = disk_bytes(root / "bulk") / args.ids
    ready_s, proc, _ = start("restart", tag, root / "bulk")
    stop(proc)
    runs.append(Run("restart", ready_s, ready_s - base))
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return runs, per_id


def render(args: argparse.Namespace, runs: list[Run], per_id: float, cmdline: str) -> str:
    by = {r.mode: r for r in runs}
    lines = [
        f"## Recovery benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`{cmdline}`: {args.ids:,} ids in {args.partitions} partitions, "
        f"{args.txn:,} records per transaction.",
        "",
        "| run | ready after (s) | restore (s) | records/s | vs faust |",
        "|---|---|---|---|---|",
    ]
    faust = by.get("faust")
    faust_rate = faust.rate(args.ids) if faust else None
    for r in runs:
        rate = r.rate(args.ids) if r.mode in ("faust", "bulk") else None
        vs = f"{rate / faust_rate:.1f}x" if rate and faust_rate else ""
        restore = "" if r.restore_s is None else f"{max(r.restore_s, 0.0):.1f}"
        lines.append(
            f"| {r.mode} | {r.ready_s:.1f} | {restore} | {f'{rate:,.0f}' if rate else ''} | {vs} |"
        )
    bulk = by["bulk"]
    lines += [
        "",
        f"- the bulk restorer's own figure (its log: records over its restore time): "
        f"{bulk.logged_rate:,.0f} records/s"
        if bulk.logged_rate
        else "- no bulk figure logged",
        f"- data dir after the bulk restore: {per_id:.1f} bytes per id (not compacted)",
        "- machine: " + "; ".join(machine()),
        "- versions: " + "; ".join(versions()),
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ids", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--txn", type=int, default=10_000, help="records per transaction")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds to ready, at most")
    parser.add_argument("--skip-faust", action="store_true", help="no per-record recovery run")
    parser.add_argument("--keep", action="store_true", help="keep the data dirs and logs")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    cmdline = "python -m bench.recovery " + " ".join(argv if argv is not None else sys.argv[1:])
    runs, per_id = run(args)
    text = render(args, runs, per_id, cmdline.strip())
    print(text)
    with RESULTS.open("a") as out:
        if out.tell() == 0:
            out.write("# Recovery benchmark results\n\nAppended by `make bench-recovery`.\n\n")
        out.write(text + "\n")


if __name__ == "__main__":
    main()
