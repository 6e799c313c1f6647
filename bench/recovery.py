"""Recovery benchmark: how long a worker with an empty data dir takes to rebuild its state from
the changelog, with Faust's per-record recovery and with the bulk restorer, in one session.

    python -m bench.recovery                        # 10,000,000 ids over 4 partitions
    python -m bench.recovery --ids 50000000 --skip-faust --skip-quix
    make bench-recovery BENCH_RECOVERY_ARGS="--ids 1000000"     # a quick run
    python -m bench.recovery --uuids --skip-faust --skip-quix  # random UUID-shaped ids

At the default 10M ids a run takes about 25 minutes here (Faust's recovery some 13 of them,
Quix Streams' fill and rebuild some 8); without those two, 4-5 minutes.

Needs a broker (``make bench-recovery`` starts one on 127.0.0.1:29092 unless
``KAFKA_BOOTSTRAP_SERVERS`` is set). It writes a ``seen_ids`` changelog of ``--ids`` ids the
way the worker's transactions do (one transactional producer per partition, ``--txn`` records per
transaction, each id on the partition the worker's partitioner gives it, values encoded as the
store's entries), then starts the real worker (``python -m app worker``) on an empty data dir and
times it from process start to ``GET /ready`` = 200:

- ``startup``: an app whose changelog is empty (the fixed cost of starting a worker);
- ``faust``: ``DEDUPE_BULK_RESTORE=false``, Faust's per-record recovery (skip with
  ``--skip-faust`` for large ``--ids``: some 10,000 records/s);
- ``bulk``: the bulk restorer (``recovery/restore.py``);
- ``restart``: the bulk run's worker stopped (SIGTERM) and started again on its data dir: only
  the tail after the offset the store holds (nothing) is read;
- ``from-snapshot``: while the restarted worker runs, ``python -m app snapshot`` (timed, size per
  id), then ``python -m app restore`` into a new data dir (timed) and a worker started on it;
- ``quix``: Quix Streams (``bench/contenders/quix_dedup.py``, the throughput benchmark's
  exactly-once contender) deduplicates every id once, which fills its changelog, then starts
  on an empty state dir and rebuilds it (skip with ``--skip-quix``: it fills at some 30,000
  ids/s);
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
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from app.factory import RESTORE_FETCH_WAIT_MS, changelog_reader
from app.rules import partition_for
from app.settings import Settings
from bench.contender_process import free_port
from bench.machine import machine, versions
from bench.measure import disk_bytes
from bench.results_file import write_latest
from bench.scale_ids import uuid_like
from recovery.restore import FETCH_BYTES
from scripts.topic_reader import committed_offsets, end_offsets
from tables.window import encode_entry

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results-recovery.md")
METHOD = (
    "`make bench-recovery` (`python -m bench.recovery`; bench/recovery.py's docstring and "
    "docs/benchmarks.md): a changelog written as the worker's transactions write it, then the "
    "real worker started on an empty data dir and timed to `GET /ready`."
)
TARGET = (
    "the bulk restore as close to `limit` (a bare read_committed consumer reading the same "
    "changelog) as it can get; a change must not make it slower, measured A/B back to back on "
    "one machine (figures of different machines differ; the ratios to `limit` of one run "
    "compare)."
)
DATA_ROOT = ROOT / "data" / "bench-recovery"
T0 = 1_790_000_000_000
#: The workers' DEDUPE_SESSION_TIMEOUT (seconds; ``--session-timeout``): a killed worker's
#: partitions move after it. 3 s as in the fault tests; the setting's default is 10 s.
SESSION_TIMEOUT = 3.0
RESTORED = re.compile(r"restored \S+ through offset \d+: (\d+) records in ([\d.]+)s")


@dataclass
class Run:
    mode: str
    ready_s: float | None
    restore_s: float | None = None
    logged_rate: float | None = None

    def rate(self, ids: int) -> float | None:
        if self.restore_s is None or self.restore_s <= 0:
            return None
        return ids / self.restore_s


def ids_for(count: int, partitions: int, uuids: bool = False) -> dict[int, list[bytes]]:
    """``count`` distinct 36-character ids, on the partitions the worker's partitioner gives.

    By default numbered ids (not UUID-shaped, kept as text) that sort in the order they are
    written, the kindest order for RocksDB; ``uuids``: random UUIDv4-shaped ids
    (:func:`bench.scale_ids.uuid_like`, 16 bytes on disk), in no order, as analytics.js and the
    Segment SDKs send them."""
    by: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for i in range(count):
        if uuids:
            key = uuid_like(i)
        else:
            key = f"{i:08x}-bench-4000-8000-{i * 2654435761 % (1 << 48):012x}".encode()
        by[partition_for(key, partitions)].append(key)
    return by


async def write_changelog(
    bootstrap: str,
    topic: str,
    by_partition: dict[int, list[bytes]],
    per_txn: int,
    compression: str,
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
            compression_type=None if compression == "none" else compression,
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


#: Every worker the benchmark started: :func:`main` kills those still running when it ends,
#: however it ends (a failed run left a worker running for half an hour).
STARTED: list[subprocess.Popen[bytes]] = []


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
    STARTED.append(proc)
    while time.monotonic() - started < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the worker exited; see {log}")
        status, body = web(port, "/ready")
        if status == 200 and body["partitions"]:
            return time.monotonic() - started, proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the worker was not ready after {timeout}s; see {log}")


def web(port: int, path: str) -> tuple[int, Any]:
    """(status, JSON body) of the worker's ``path``; (0, None) while it does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> float:
    """Seconds until ``check()`` holds (polled every 50 ms); RuntimeError after ``timeout``."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout:
            raise RuntimeError(f"{what}: not after {timeout}s")
        time.sleep(0.05)
    return time.monotonic() - started


def standby_takeover(
    owner: subprocess.Popen[bytes],
    owner_port: int,
    env: dict[str, str],
    port: int,
    log: Path,
    partitions: int,
    timeout: float,
) -> tuple[float, int]:
    """A second worker (``env``, standbys on) joins ``owner``; once its standby copies of the
    owner's partitions are caught up, the owner is killed (kill -9). Seconds from the kill to
    the second worker ready with every partition, and the changelog offsets it restored then."""
    _, second = ready_after(env, port, log, timeout)

    def standing_by() -> bool:
        owner_status, owner_body = web(owner_port, "/ready")
        _, stats = web(port, "/stats")
        if owner_status != 200 or not stats:
            return False
        followed = {s["partition"] for s in stats["standbys"].values() if s["lag"] == 0}
        return set(owner_body["partitions"]) <= followed and len(owner_body["partitions"]) > 0

    wait_for(standing_by, timeout, "the second worker's standbys caught up")
    before = log.stat().st_size
    owner.kill()
    killed = time.monotonic()
    owner.wait(30)
    everything = list(range(partitions))

    def owning_all() -> bool:
        status, body = web(port, "/ready")
        return status == 200 and sorted(body["partitions"]) == everything

    wait_for(owning_all, timeout, "the standby's takeover")
    took = time.monotonic() - killed
    with log.open("rb") as f:
        f.seek(before)
        tail = f.read().decode(errors="replace")
    restored = sum(
        int(n) for n in re.findall(r"restoring \S+ from offset \d+ to \d+ \((\d+)", tail)
    )
    stop(second)
    return took, restored


async def produce_keys(bootstrap: str, topic: str, by_partition: dict[int, list[bytes]]) -> None:
    """Each id once into a new topic, on the partition the worker's partitioner gives it."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, len(by_partition), 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20)
    await producer.start()
    try:
        for partition, keys in sorted(by_partition.items()):
            for key in keys:
                await producer.send(topic, b"{}", key=key, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def quix_recovery(
    bootstrap: str, tag: str, by_partition: dict[int, list[bytes]], root: Path, timeout: float
) -> tuple[float, float]:
    """Quix Streams' recovery of the same ids: the throughput benchmark's Quix contender
    (bench/contenders/quix_dedup.py, exactly-once, RocksDB state) deduplicates every id once,
    which fills its changelog; then it starts again on an empty state dir and rebuilds its
    store from that changelog. Seconds of that recovery (its log's "Beginning recovery
    check" to "Recovery process complete"), and from the process start to the latter."""
    source, group = f"{tag}-quix-in", f"{tag}-quix"
    asyncio.run(produce_keys(bootstrap, source, by_partition))
    ends = asyncio.run(end_offsets(bootstrap, source))
    state = root / "quix-state"
    command = [
        sys.executable, "-m", "bench.contenders.quix_dedup", "--bootstrap", bootstrap,
        "--input", source, "--output", f"{tag}-quix-out", "--partitions",
        str(len(by_partition)), "--state-dir", str(state), "--group", group,
    ]  # fmt: skip

    def caught_up() -> bool:
        done = asyncio.run(committed_offsets(bootstrap, group))
        return all(done.get(TopicPartition(source, p), -1) >= end for p, end in ends.items())

    with (root / "quix-fill.log").open("ab") as out:
        fill = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    filled = wait_for(caught_up, timeout, "Quix's deduplication of every id")
    stop(fill)
    print(f"quix: every id deduplicated (its changelog filled) in {filled:.1f}s", flush=True)
    shutil.rmtree(state)
    log = root / "quix-recovery.log"
    begun: list[float] = []

    def recovered() -> bool:
        text = log.read_text(errors="replace") if log.exists() else ""
        if not begun and "Beginning recovery check" in text:
            begun.append(time.monotonic())
        return "Recovery process complete" in text

    with log.open("ab") as out:
        started = time.monotonic()
        proc = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    total = wait_for(recovered, timeout, "Quix's recovery")
    stop(proc)
    recovery = started + total - (begun[0] if begun else started)
    print(f"quix: recovered in {recovery:.1f}s ({total:.1f}s after its start)", flush=True)
    return recovery, total


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(30)


def worker_env(
    bootstrap: str,
    app_id: str,
    partitions: int,
    data: Path,
    port: int,
    session_timeout: float = SESSION_TIMEOUT,
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
        DEDUPE_SESSION_TIMEOUT=f"{session_timeout:g}s",
    )
    return env


def changelog_consumer(settings: Settings) -> AIOKafkaConsumer:
    """aiokafka's consumer with the changelog reader's settings: committed records only, the
    same fetch sizes and wait, no group."""
    return AIOKafkaConsumer(
        bootstrap_servers=settings.bootstrap_servers,
        **settings.kafka_client_kwargs(),
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=FETCH_BYTES,
        fetch_max_wait_ms=RESTORE_FETCH_WAIT_MS,
    )


async def bare_read(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds a consumer with the restorer's settings takes to read ``topic`` to its end,
    partition after partition, writing nothing: the limit of a restore in this process."""
    reader = changelog_consumer(Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}))
    await reader.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        ends = await reader.end_offsets(tps)
        started = time.monotonic()
        for tp in tps:
            reader.assign([tp])
            reader.seek(tp, 0)
            while await reader.position(tp) < ends[tp]:
                await reader.getmany(tp, timeout_ms=500)
        return time.monotonic() - started
    finally:
        await reader.stop()


async def batch_read(bootstrap: str, topic: str, partitions: int) -> float:
    """Seconds the bulk restorer's own reader (``recovery/reader.py``) takes to read
    ``topic`` to its end, partition after partition, writing nothing."""
    reader = changelog_reader(Settings.from_env({"KAFKA_BOOTSTRAP_SERVERS": bootstrap}))
    try:
        ends = await end_offsets(bootstrap, topic)
        started = time.monotonic()
        for p in range(partitions):
            tp, offset = TopicPartition(topic, p), 0
            while offset < ends[p]:
                offset = (await reader.fetch(tp, offset, ends[p])).next_offset
        return time.monotonic() - started
    finally:
        await reader.close()


def changelog_bytes(bootstrap: str, topic: str) -> int | None:
    """Bytes of ``topic``'s log segments on the broker's disk, when the broker is the local
    one of ``scripts/kafka-local.sh`` (its data dir under .cache/kafka-run/<port>); else None."""
    port = bootstrap.rsplit(":", 1)[-1]
    logs = ROOT / ".cache" / "kafka-run" / port / "logs"
    segments = list(logs.glob(f"{topic}-*/*.log"))
    return sum(f.stat().st_size for f in segments) if segments else None


def app_command(env: dict[str, str], *args: str) -> float:
    """Seconds ``python -m app <args>`` took (it must succeed)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "app", *args], env=env, cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"python -m app {' '.join(args)} failed: {done.stderr[-2000:]}")
    return time.monotonic() - started


def logged_rate(log: Path) -> float | None:
    """The bulk restorer's own rate: records over the sum of its restore times."""
    found = RESTORED.findall(log.read_text(errors="replace"))
    seconds = sum(float(s) for _, s in found)
    return sum(int(n) for n, _ in found) / seconds if found and seconds > 0 else None


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
    if not args.skip_faust:
        ready_s, proc, _ = start("faust", tag, root / "faust", DEDUPE_BULK_RESTORE="false")
        stop(proc)
        runs.append(Run("faust", ready_s, ready_s - base))
        shutil.rmtree(root / "faust", ignore_errors=True)
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
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    return runs, sizes


def render(args: argparse.Namespace, runs: list[Run], sizes: dict[str, float], cmdline: str) -> str:
    by = {r.mode: r for r in runs}
    lines = [
        f"## Recovery benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`{cmdline}`: {args.ids:,} {'random UUID-shaped' if args.uuids else 'numbered'} ids "
        f"in {args.partitions} partitions, {args.txn:,} records per transaction.",
        "",
        "| run | ready after (s) | restore (s) | records/s | vs faust | vs limit |",
        "|---|---|---|---|---|---|",
    ]
    faust, limit = by.get("faust"), by["limit"]
    faust_rate, limit_rate = (faust.rate(args.ids) if faust else None), limit.rate(args.ids)
    for r in runs:
        rate = r.rate(args.ids) if r.mode in ("limit", "reader", "faust", "bulk", "quix") else None
        vs = f"{rate / faust_rate:.1f}x" if rate and faust_rate else ""
        vs_limit = f"{rate / limit_rate:.2f}x" if rate and limit_rate else ""
        ready = "" if r.ready_s is None else f"{r.ready_s:.1f}"
        restore = "" if r.restore_s is None else f"{max(r.restore_s, 0.0):.1f}"
        shown = f"{rate:,.0f}" if rate else ""
        lines.append(f"| {r.mode} | {ready} | {restore} | {shown} | {vs} | {vs_limit} |")
    bulk = by["bulk"]
    lines += [
        "",
        "- limit: a bare aiokafka consumer (read_committed, the restorer's fetch sizes) reading "
        "the changelog, writing nothing; reader: the restorer's own reader "
        "(recovery/reader.py) reading it, writing nothing",
        "- quix: Quix Streams (the throughput benchmark's exactly-once contender) rebuilding its "
        "RocksDB state of the same ids from its own changelog on an empty state dir (its log's "
        "recovery start to end)"
        if "quix" in by
        else "- quix: not run (--skip-quix)",
        f"- the bulk restorer's own figure (its log: records over its restore time): "
        f"{bulk.logged_rate:,.0f} records/s"
        if bulk.logged_rate
        else "- no bulk figure logged",
        f"- the changelog on the broker's disk (its log segments; {args.compression} batches): "
        f"{sizes['changelog bytes per id']:.1f} bytes per id"
        if "changelog bytes per id" in sizes
        else "- the changelog's size: not measured (the broker is not the local one)",
        f"- data dir after the bulk restore: {sizes['data dir bytes per id']:.1f} bytes per id "
        "(the restore compacts level 0 before the worker is ready)",
        f"- snapshot of the running worker (`python -m app snapshot`): "
        f"{sizes['snapshot seconds']:.1f}s, {sizes['snapshot bytes per id']:.1f} bytes per id; "
        f"`restore` into a new data dir: {sizes['restore seconds']:.1f}s (both include the "
        "start of a Python process); from-snapshot: a worker started on it",
        f"- standby takeover: a second worker (`DEDUPE_STANDBY_REPLICAS=1`) joins the restarted "
        f"one; once its standby copies are caught up the first is killed (kill -9); the second "
        f"is ready with every partition {sizes['takeover seconds']:.1f}s after the kill, the "
        f"session timeout ({sizes['session timeout']:g}s) included, having restored "
        f"{sizes['takeover offsets']:,.0f} changelog offsets (of {args.ids:,})",
        "- machine: " + "; ".join(machine()),
        "- versions: " + "; ".join(versions()),
        "",
    ]
    return "\n".join(lines)


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
    parser.add_argument("--skip-faust", action="store_true", help="no per-record recovery run")
    parser.add_argument(
        "--skip-quix", action="store_true", help="no Quix Streams recovery run (some 30k ids/s)"
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
