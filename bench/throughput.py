"""Contender benchmark: the same de-duplication job on the same broker, data and partitions.

    make bench                                    # 2,000,000 events per profile, all contenders
    python -m bench.throughput --events 200000    # smaller
    python -m bench.throughput --contenders a,b --profiles dup20
    python -m bench.throughput --contenders b --events 100000 --py-spy data/profile  # profile (b)

Contenders, one at a time, each a subprocess (so its process tree can be measured):

- (a) ``bench.contenders.copy_eos``: transactional consume -> produce copy, no dedup (the limit);
- (b) our worker, ``python -m app worker`` (exactly-once, the default);
- (d) ``bench.contenders.quix_dedup`` (Quix Streams), (e) ``bench.contenders.spark_dedup``
  (Spark ``dropDuplicatesWithinWatermark``, on ``local[2]``: two cores);
- (f) our exactly-once worker as two processes in one consumer group
  (``bench.contenders.worker_group``), one per core as Spark has them: (b) is one Python
  process, so one core.

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

The watcher, the producer and the contender share the machine's cores; the broker too. Every
run rewrites ``bench/results.md`` and ``bench/results.png``. Topics of a contender are deleted
after its run (``--keep-topics`` keeps them).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import shlex
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.structs import TopicPartition

from app import strategy
from bench.measure import (
    TreeCpu,
    disk_bytes,
    events_per_second,
    percentile,
    sample_tree,
)
from bench.report import (
    CONTENDERS,
    GROUP_WORKERS,
    WORKERS,
    Result,
    render_table,
    targets,
    write_chart,
)
from scripts.streams import OutRecord, make_event, produce
from scripts.topic_reader import start_consumer

ROOT = Path(__file__).resolve().parent.parent
#: profile -> (kind of event, share of repeats). "id": events with a messageId, keyed by it;
#: "ps": producer sequences (64 producers, keyed by name, in order); "fp": no messageId, unkeyed
#: (the worker runs with DEDUPE_MISSING_ID=fingerprint and re-keys every record by its hash).
#: Only our worker (b, f) can run "ps" and "fp".
PROFILES = {
    "dup0.6": ("id", 0.006),
    "dup20": ("id", 0.20),
    "ps20": ("ps", 0.20),
    "fp20": ("fp", 0.20),
}
PRODUCERS = 64
PROFILE_KINDS = {
    "id": "events keyed by messageId",
    "ps": f"producer sequences from {PRODUCERS} producers",
    "fp": "events without a messageId, deduplicated by fingerprint",
}
FINGERPRINT_EXCLUDE = frozenset({"sentAt", "receivedAt", "_metadata"})
#: The worker's default commit interval (DEDUPE_COMMIT_INTERVAL); the p99 target builds on it.
COMMIT_INTERVAL = 0.1
HEADERS = (("content-type", b"application/json"),)


# -- data -------------------------------------------------------------------------------------


def generate(
    events: int, dup_fraction: float, seed: int = 7, kind: str = "id"
) -> Iterator[OutRecord]:
    """Exactly ``events`` records, ``round(events * dup_fraction)`` of them repeats (see the
    module docstring), deterministic for ``seed``. A record's ``message_id`` is the event's
    identity: its messageId, its fingerprint (``fp``) or ``<producer>\\x00<sequence>`` (``ps``),
    as :func:`output_identity` reads it back from the output."""
    rng = random.Random(seed)
    repeats = round(events * dup_fraction)
    unique = events - repeats
    repeated = set(rng.sample(range(unique), repeats)) if repeats else set()
    late: dict[int, list[OutRecord]] = {}
    base_ms = 1_790_000_000_000  # event times in the JSON; fixed, so every run is byte-identical
    for i in range(unique):
        yield from late.pop(i, ())
        message_id, value = make_event(rng, i, base_ms)
        if kind == "id":
            record = OutRecord(message_id, message_id.encode(), value, HEADERS)
        elif kind == "fp":
            doc = json.loads(value)
            del doc["messageId"]
            fingerprint = strategy.fingerprint(doc, FINGERPRINT_EXCLUDE)
            record = OutRecord(fingerprint, None, json.dumps(doc).encode(), HEADERS)
        else:
            producer = f"producer-{i % PRODUCERS}"
            seq = str(i // PRODUCERS)
            headers = (
                *HEADERS,
                ("dedupe.producer", producer.encode()),
                ("dedupe.sequence", seq.encode()),
            )
            record = OutRecord(f"{producer}\x00{seq}", producer.encode(), value, headers)
        yield record
        if i in repeated:
            if rng.random() < 0.5:
                yield record
            else:
                late.setdefault(i + rng.randrange(1_000, 10_000), []).append(record)
    for at in sorted(late):
        yield from late[at]


# -- the output watcher -----------------------------------------------------------------------


def output_identity(key: bytes | None, headers: Sequence[tuple[str, bytes]]) -> bytes:
    """The event an output record is: its producer and sequence when it has them, else its key
    (messageId or fingerprint)."""
    if headers:
        found = dict(headers)
        producer = found.get("dedupe.producer")
        if producer is not None:
            return producer + b"\x00" + found.get("dedupe.sequence", b"")
    return key or b""


class Watcher:
    """A read_committed consumer of the output topic: counts, distinct ids, arrival times."""

    def __init__(self, consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> None:
        self.consumer = consumer
        self.tps = tps
        self.total = 0
        self.seen: set[bytes] = set()
        self.expected_new = 0  # distinct ids of the backlog seen
        self.backlog: set[bytes] = set()
        self.first_at: float | None = None
        self.last_new_at: float | None = None
        self.sent_at: dict[bytes, float] = {}
        self.latencies: list[float] = []

    @classmethod
    async def start(cls, bootstrap: str, topic: str, partitions: int) -> Watcher:
        consumer = await start_consumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            fetch_max_wait_ms=50,
            max_partition_fetch_bytes=8 * 1024 * 1024,
            fetch_max_bytes=64 * 1024 * 1024,
        )
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        return cls(consumer, tps)

    async def poll(self, timeout_ms: int = 200) -> None:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms, max_records=50_000)
        now = time.time()
        for records in batches.values():
            for r in records:
                self.total += 1
                if self.first_at is None:
                    self.first_at = now
                key = output_identity(r.key, r.headers)
                if key in self.seen:
                    continue
                self.seen.add(key)
                if key in self.backlog:
                    self.expected_new += 1
                    self.last_new_at = now
                sent = self.sent_at.pop(key, None)
                if sent is not None:
                    self.latencies.append(now - sent)

    async def drain(self, timeout: float = 60) -> None:
        """Read up to the current end (last stable offsets)."""
        ends = await self.consumer.end_offsets(self.tps)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            positions = [await self.consumer.position(tp) for tp in self.tps]
            if all(pos >= ends[tp] for pos, tp in zip(positions, self.tps, strict=True)):
                return
            await self.poll(200)

    async def stop(self) -> None:
        await self.consumer.stop()


# -- the contender process --------------------------------------------------------------------


@dataclass
class Names:
    tag: str

    @property
    def input(self) -> str:
        return f"{self.tag}-in"

    @property
    def output(self) -> str:
        return f"{self.tag}-out"

    @property
    def dlq(self) -> str:
        return f"{self.tag}-dlq"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def command(key: str, bootstrap: str, names: Names, partitions: int, state: Path) -> list[str]:
    module = CONTENDERS[key][0]
    if key == "f":
        ports = ",".join(str(free_port()) for _ in range(GROUP_WORKERS))
        group = [sys.executable, "-m", f"bench.contenders.{module}", "--web-ports", ports]
        return [*group, "--state-dir", str(state)]
    if key in WORKERS:
        return [sys.executable, "-m", "app", "worker", "-l", "info"]
    return [
        sys.executable,
        "-m",
        f"bench.contenders.{module}",
        "--bootstrap",
        bootstrap,
        "--input",
        names.input,
        "--output",
        names.output,
        "--partitions",
        str(partitions),
        "--state-dir",
        str(state),
        "--group",
        names.tag,
    ]


def environment(
    key: str,
    bootstrap: str,
    names: Names,
    partitions: int,
    state: Path,
    worker_settings: dict[str, str] | None = None,
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")}
    if key in WORKERS:
        env.update(worker_settings or {})
        env.update(
            KAFKA_BOOTSTRAP_SERVERS=bootstrap,
            DEDUPE_APP_ID=names.tag,
            DEDUPE_INPUT_TOPIC=names.input,
            DEDUPE_OUTPUT_TOPIC=names.output,
            DEDUPE_DLQ_TOPIC=names.dlq,
            DEDUPE_PARTITIONS=str(partitions),
            DEDUPE_DATA_DIR=str(state),
            DEDUPE_WEB_PORT=str(free_port()),
        )
    return env


def last_error(log: Path) -> str:
    """The last meaningful line of a contender's log (its exception, usually)."""
    if not log.exists():
        return ""
    lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line or "Exception" in line or "error" in line:
            return line[:300]
    return lines[-1][:300] if lines else ""


@dataclass
class Options:
    bootstrap: str
    events: int
    partitions: int
    latency_events: int
    latency_rate: float
    start_timeout: float
    idle_timeout: float
    work_dir: Path
    keep_topics: bool
    #: Where py-spy profiles of the worker contenders go (``--py-spy``); None: not profiled.
    py_spy: Path | None = None
    #: Extra ``DEDUPE_*`` settings for the worker contenders (``--worker-setting``).
    worker_settings: dict[str, str] = field(default_factory=dict)
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:6])
    #: Replication factor of every topic of the run (``--replication``; 3 on a cluster).
    replication: int = 1
    #: The chart's file name, beside the results file.
    chart_name: str = "results.png"


async def create_topics(
    bootstrap: str, topics: list[str], partitions: int, replication: int = 1
) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(t, partitions, replication) for t in topics])
    finally:
        await admin.close()


async def delete_topics(bootstrap: str, tag: str) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        doomed = [t for t in await admin.list_topics() if tag in t]
        if doomed:
            await admin.delete_topics(doomed)
    finally:
        await admin.close()


class Run:
    """One contender on one profile."""

    def __init__(self, opts: Options, profile: str, key: str) -> None:
        self.opts = opts
        self.profile = profile
        self.key = key
        safe = profile.replace(".", "_")
        self.names = Names(f"bench-{opts.run_id}-{safe}-{key}")
        self.dir = opts.work_dir / opts.run_id / safe / CONTENDERS[key][0]
        self.state = self.dir / "state"
        self.log = self.dir / "contender.log"
        self.result = Result(key, events=opts.events)
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu = TreeCpu()
        self.peak_rss = 0
        self.pids: set[int] = set()
        self._latency_ids: list[bytes] = []
        self.spy: subprocess.Popen[bytes] | None = None
        self.spy_out: Path | None = None

    def say(self, text: str) -> None:
        print(f"  [{self.key}] {self.profile}: {text}", flush=True)

    def sample(self) -> None:
        if self.proc is None:
            return
        s = sample_tree(self.proc.pid)
        self.pids.update(s.pids)
        self.peak_rss = max(self.peak_rss, s.rss_bytes)
        self.cpu.update(s.cpu_by_pid)

    async def run(self, kind: str, dup_fraction: float) -> Result:
        r = self.result
        opts = self.opts
        self.dir.mkdir(parents=True, exist_ok=True)
        await create_topics(
            opts.bootstrap, [self.names.input, self.names.output], opts.partitions, opts.replication
        )
        backlog: set[bytes] = set()

        def records() -> Iterator[OutRecord]:
            for rec in generate(opts.events, dup_fraction, kind=kind):
                backlog.add(rec.message_id.encode())
                yield rec

        started = time.monotonic()
        await produce(opts.bootstrap, self.names.input, records())
        r.unique = len(backlog)
        self.say(
            f"produced {opts.events:,} records ({r.unique:,} unique) in "
            f"{time.monotonic() - started:.0f}s; starting {CONTENDERS[self.key][1]}"
        )
        watcher = await Watcher.start(opts.bootstrap, self.names.output, opts.partitions)
        watcher.backlog = backlog
        try:
            await self._measure(watcher)
        finally:
            await self._stop()
            with contextlib.suppress(Exception):
                await watcher.drain()
            await watcher.stop()
        expected = backlog | set(self._latency_ids)
        r.out_total = watcher.total
        r.out_distinct = len(watcher.seen)
        r.missing = len(backlog - watcher.seen)
        r.unexpected = len(watcher.seen - expected)
        r.unique = len(backlog)
        if watcher.latencies:
            ms = [x * 1000 for x in watcher.latencies]
            r.p50_ms = percentile(ms, 50)
            r.p99_ms = percentile(ms, 99)
        r.latency_samples = len(watcher.latencies)
        r.latency_missing = len(watcher.sent_at)
        if r.latency_missing:
            r.notes.append(f"{r.latency_missing:,} latency events never arrived")
        r.peak_rss_bytes = self.peak_rss or None
        r.stored_ids = r.unique + len(self._latency_ids) - r.latency_missing
        size = disk_bytes(self.state)
        r.disk_bytes = size or None
        if size:
            r.notes.append(f"state dir {size / 2**20:,.1f} MiB for {r.stored_ids:,} ids")
        if not opts.keep_topics:
            with contextlib.suppress(Exception):
                await delete_topics(opts.bootstrap, self.names.tag)
        return r

    async def _measure(self, w: Watcher) -> None:
        r = self.result
        opts = self.opts
        key = self.key
        self.state.mkdir(parents=True, exist_ok=True)
        cmd = command(key, opts.bootstrap, self.names, opts.partitions, self.state)
        settings = dict(opts.worker_settings or {})
        if PROFILES[self.profile][0] == "fp":
            settings["DEDUPE_MISSING_ID"] = "fingerprint"
        env = environment(key, opts.bootstrap, self.names, opts.partitions, self.state, settings)
        with self.log.open("ab") as log:
            log.write(f"$ {shlex.join(cmd)}\n".encode())
        t0 = time.time()
        self.proc = self._spawn(cmd, env)
        self._start_spy()
        next_sample = next_print = 0.0
        complete_at: float | None = None
        while True:
            await w.poll(200)
            now = time.time()
            if now >= next_sample:
                self.sample()
                next_sample = now + 0.5
            done = w.expected_new >= r.unique and (key != "a" or w.total >= opts.events)
            if done:
                complete_at = w.last_new_at or now
                break
            if now >= next_print:
                next_print = now + 5
                so_far = ""
                if w.first_at is not None and now > w.first_at:
                    equiv = w.expected_new / max(r.unique, 1) * opts.events
                    so_far = f", {equiv / (now - w.first_at):,.0f} events/s so far"
                self.say(
                    f"{w.expected_new:,}/{r.unique:,} ids out{so_far}, "
                    f"RSS {self.peak_rss / 2**20:,.0f} MiB, CPU {self.cpu.total:,.0f}s"
                )
            code = self.proc.poll()
            if code is not None:
                r.status = "failed"
                r.error = f"exit {code}: {last_error(self.log)}"
                self.say(r.error)
                return
            if w.first_at is None and now - t0 > opts.start_timeout:
                r.status = "incomplete"
                r.error = f"no output after {opts.start_timeout:.0f}s"
                self.say(r.error)
                return
            last = w.last_new_at or w.first_at
            if last is not None and now - last > opts.idle_timeout:
                r.status = "incomplete"
                r.error = (
                    f"output stalled at {w.expected_new:,}/{r.unique:,} ids "
                    f"for {opts.idle_timeout:.0f}s"
                )
                self.say(r.error)
                return
        self.sample()
        await self._stop_spy()
        r.status = "ok"
        r.cpu_seconds = self.cpu.total
        assert w.first_at is not None
        r.sustained_eps = events_per_second(opts.events, complete_at - w.first_at)
        r.overall_eps = events_per_second(opts.events, complete_at - t0)
        self.say(
            f"output complete: {r.sustained_eps or 0:,.0f} events/s sustained "
            f"({complete_at - w.first_at:.1f}s from first to last output), "
            f"{r.overall_eps or 0:,.0f} incl. start-up"
        )
        await self._latency_phase(w)

    def _spawn(self, cmd: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
        with self.log.open("ab") as log:
            return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)

    async def _latency_phase(self, w: Watcher) -> None:
        opts = self.opts
        if opts.latency_events <= 0:
            return
        rng = random.Random(f"latency-{self.profile}")
        producer = AIOKafkaProducer(
            bootstrap_servers=opts.bootstrap, acks="all", enable_idempotence=True, linger_ms=0
        )
        await producer.start()
        sent_all = asyncio.Event()

        async def send() -> None:
            start = time.monotonic()
            base_ms = int(time.time() * 1000)
            try:
                for i in range(opts.latency_events):
                    delay = start + i / opts.latency_rate - time.monotonic()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    message_id, value = make_event(rng, i, base_ms)
                    key = message_id.encode()
                    self._latency_ids.append(key)
                    w.sent_at[key] = time.time()
                    await producer.send(self.names.input, value, key=key, headers=list(HEADERS))
                await producer.flush()
            finally:
                sent_all.set()

        sender = asyncio.create_task(send())
        next_sample = 0.0
        deadline: float | None = None
        while True:
            await w.poll(50)
            now = time.time()
            if now >= next_sample:
                self.sample()
                next_sample = now + 0.5
            if sent_all.is_set():
                if not w.sent_at:
                    break
                deadline = deadline or now + 30
                if now > deadline:
                    break
            if self.proc is not None and self.proc.poll() is not None:
                break
        await sender
        await producer.stop()
        ms = sorted(x * 1000 for x in w.latencies)
        self.say(
            f"latency: {len(ms):,} events at {opts.latency_rate:g}/s, "
            f"p50 {percentile(ms, 50) or 0:.0f} ms, p99 {percentile(ms, 99) or 0:.0f} ms"
        )

    def _start_spy(self) -> None:
        """With ``--py-spy``: sample a worker contender (b, c, f) until its backlog is done."""
        opts = self.opts
        if opts.py_spy is None or self.key not in WORKERS or self.proc is None:
            return
        opts.py_spy.mkdir(parents=True, exist_ok=True)
        self.spy_out = opts.py_spy / f"{self.profile.replace('.', '_')}-{self.key}.folded"
        spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(spy), "record", "--pid", str(self.proc.pid), "--rate", "100"]
        cmd += ["--nonblocking", "--format", "raw", "--output", str(self.spy_out)]
        if self.key == "f":
            cmd.append("--subprocesses")  # the workers, not their launcher
        with self.log.open("ab") as log:
            log.write(f"$ {shlex.join(cmd)}\n".encode())
            self.spy = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        self.result.notes.append(f"profiled with py-spy (100 Hz, non-blocking): {self.spy_out}")

    async def _stop_spy(self) -> None:
        spy, out = self.spy, self.spy_out
        if spy is None or out is None:
            return
        self.spy = None
        if spy.poll() is None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its output and exits
        for _ in range(60):
            if spy.poll() is not None:
                break
            await asyncio.sleep(0.5)
        else:
            spy.kill()
        if out.exists():
            from bench.profile import parse, summary

            with out.open() as f:
                text = summary(parse(f))
            out.with_suffix(".txt").write_text(text)
            self.say(f"profile: {out.with_suffix('.txt')}\n{text}")

    async def _stop(self) -> None:
        await self._stop_spy()
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + 60
            while proc.poll() is None and time.monotonic() < deadline:
                with contextlib.suppress(Exception):
                    self.sample()
                await asyncio.sleep(0.5)
            if proc.poll() is None:
                self.result.notes.append("did not stop within 60 s of SIGTERM; killed")
                for pid in sorted(self.pids, reverse=True):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                proc.wait(30)
        # descendants that outlived it (a JVM of Spark, say) are ours to stop
        for pid in self.pids - {proc.pid}:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


# -- the report -------------------------------------------------------------------------------


def machine() -> list[str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    mem = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                mem = f"{int(line.split()[1]) / 2**20:.1f} GiB"
    return [
        f"cores: {os.cpu_count()}",
        f"RAM: {mem}",
        f"CPU: {cpu}",
        f"kernel: {platform.system()} {platform.release()}",
    ]


def kafka_version() -> str:
    version = os.environ.get("KAFKA_VERSION")
    if version:
        return version
    for line in (ROOT / "scripts" / "kafka-local.sh").read_text().splitlines():
        if line.startswith("DEFAULT_KAFKA_VERSION="):
            return line.split("=", 1)[1].strip() + " (scripts/kafka-local.sh default)"
    return "unknown"


def versions() -> list[str]:
    out = [f"python {platform.python_version()}"]
    for dist in ("faust-streaming", "aiokafka", "rocksdict", "quixstreams", "pyspark"):
        try:
            out.append(f"{dist} {metadata.version(dist)}")
        except metadata.PackageNotFoundError:
            out.append(f"{dist} not installed")
    out.append(f"Kafka {kafka_version()}")
    return out


def broker_shape(opts: Options) -> str:
    brokers = len(opts.bootstrap.split(","))
    if brokers == 1 and opts.replication == 1:
        return "a single-node broker"
    return f"{brokers} brokers, every topic with replication {opts.replication}"


def render(cmdline: str, opts: Options, results: dict[str, list[Result]], started: datetime) -> str:
    lines = [
        "# Contender benchmark",
        "",
        f"Generated by `{cmdline}` on {started:%Y-%m-%d %H:%M} UTC "
        f"(run `{opts.run_id}`); method in the docstring of "
        "[bench/throughput.py](throughput.py). Every contender ran alone, as a subprocess, on "
        f"the same local Kafka ({broker_shape(opts)}), with {opts.partitions} partitions and "
        "the same input records.",
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
            *(f"- {t}" for t in targets(rows, COMMIT_INTERVAL)),
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
        "--contenders", default=",".join(CONTENDERS), help="which of a,b,d,e,f (default all)"
    )
    p.add_argument(
        "--profiles", default=",".join(PROFILES), help=f"{','.join(PROFILES)} (default all)"
    )
    p.add_argument("--partitions", type=int, default=4)
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
    results: dict[str, list[Result]] = {}
    print(
        f"bench {opts.run_id}: {opts.events:,} records x profiles {args.profile_names} x "
        f"contenders {args.contender_keys} on {opts.bootstrap}",
        flush=True,
    )
    for profile in args.profile_names:
        results[profile] = []
        kind, dup_fraction = PROFILES[profile]
        for key in args.contender_keys:
            if kind != "id" and key not in WORKERS:
                continue  # only our worker has this strategy
            run = Run(opts, profile, key)
            print(f"== {profile} / {CONTENDERS[key][1]}", flush=True)
            try:
                result = await run.run(kind, dup_fraction)
            except Exception as exc:  # the harness records a broken run and goes on
                result = run.result
                result.status = "failed"
                result.error = f"harness: {exc!r}"[:300]
                print(f"  [{key}] {profile}: {result.error}", flush=True)
            results[profile].append(result)
            args.results.write_text(render(cmdline, opts, results, started))
    args.results.write_text(render(cmdline, opts, results, started))
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
