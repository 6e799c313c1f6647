"""One contender on one profile of the contender benchmark (bench/throughput.py, whose
docstring gives the method): feed its input, start it, watch its output until complete, measure
latency, CPU, memory and disk, stop it and check what it wrote."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from aiokafka import AIOKafkaProducer

from bench.contender_data import HEADERS, PROFILES, generate
from bench.contender_process import (
    Names,
    Options,
    command,
    environment,
    expiry_scans,
    last_error,
)
from bench.measure import TreeCpu, disk_bytes, events_per_second, percentile, sample_tree
from bench.report import CONTENDERS, WORKERS, Result
from bench.spy import Spy
from bench.watcher import Watcher
from scripts.streams import OutRecord, make_event, produce
from scripts.topic_admin import create_topics, delete_topics_containing

ROOT = Path(__file__).resolve().parent.parent


class Run:
    """One contender on one profile."""

    def __init__(self, opts: Options, profile: str, key: str, round_: int = 0) -> None:
        self.opts = opts
        self.profile = profile
        self.key = key
        safe = profile.replace(".", "_")
        # Topics, group and state dir of their own per round: a contender must start on empty
        # state and topics (a topic deleted by the last round may still be going).
        self.names = Names(f"bench-{opts.run_id}-{round_}-{safe}-{key}")
        self.dir = opts.work_dir / opts.run_id / f"round-{round_}" / safe / CONTENDERS[key][0]
        self.state = self.dir / "state"
        self.log = self.dir / "contender.log"
        self.result = Result(key, events=opts.events)
        self.proc: subprocess.Popen[bytes] | None = None
        self.cpu = TreeCpu()
        self.peak_rss = 0
        self.pids: set[int] = set()
        self._latency_ids: list[bytes] = []
        self.spy: Spy | None = None

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
            opts.bootstrap,
            [self.names.input, self.names.output],
            opts.partitions,
            replication=opts.replication,
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
        scans = expiry_scans(self.log)
        if scans:
            r.notes.append(scans)
        if not opts.keep_topics:
            with contextlib.suppress(Exception):
                await delete_topics_containing(opts.bootstrap, self.names.tag)
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
        out = opts.py_spy / f"{self.profile.replace('.', '_')}-{self.key}.folded"
        self.spy = Spy(out, self.log)
        self.spy.start(self.proc.pid, subprocesses=self.key == "f")
        self.result.notes.append(f"profiled with py-spy (100 Hz, non-blocking): {out}")

    async def _stop_spy(self) -> None:
        spy, self.spy = self.spy, None
        if spy is not None:
            summary = await spy.stop()
            if summary:
                self.say(f"profile: {spy.out.with_suffix('.txt')}\n{summary}")

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
