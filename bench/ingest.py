"""Ingest benchmark: the HTTP ingest service against a bare handler that only produces to Kafka.

    make bench-ingest                                  # 20 s per case, 32 clients
    python -m bench.ingest --seconds 10 --concurrency 16

Two servers, one after the other, on the same broker, each producing to its own fresh topic
(8 partitions): the ingest service (``python -m ingest``, a write key set, as in production)
and the limit, ``bench/ingest_bare.py`` (read, parse, produce with the same producer settings,
answer: nothing else). For each server and case (``bench/ingest_load.py``: single events on
``/v1/track``, batches of 100 on ``/v1/batch``, the same gzipped) ``--concurrency`` clients post
for ``--seconds``, each sending its next request once the last was answered: requests/s,
events/s, request -> acknowledgement p50/p99, and the server's CPU per 1,000 events (its
process tree, from /proc). Then, with a dedup worker on a fresh topic, single events at
``--latency-rate`` per second for ``--latency-seconds``: request -> acknowledgement and request
-> visible in the clean topic to a read_committed reader, p50/p99. The client, the worker, the
broker and the server share the machine's cores. Results: bench/results-ingest.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import aiohttp

from bench.ingest_load import CASES, WRITE_KEY, Phase, paced, saturate
from bench.machine import machine
from bench.measure import descendants, percentile, ratio, read_stats
from bench.results_file import write_latest
from bench.watcher import Watcher
from scripts.topic_admin import create_topics

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).with_name("results-ingest.md")
PARTITIONS = 8
SERVER_PORT = 29480
WORKER_WEB_PORT = 29481
#: Case -> (what the saturating phase measured, the server's CPU seconds in it).
Cases = dict[str, tuple[Phase, float]]
SERVERS = {"ingest": "ingest service", "bare": "bare handler (the limit)"}
METHOD = (
    "`make bench-ingest` (`python -m bench.ingest`; its docstring): the ingest service and a "
    "bare handler that only parses and produces, one after the other on one local broker, "
    "saturated by concurrent clients per request shape, then paced single events through a "
    "dedup worker to the clean topic."
)
THROUGHPUT_HEAD = (
    "| case | server | requests/s | events/s | vs limit | ack p50 ms | ack p99 ms "
    "| server CPU ms / 1k events | failed |"
)
LATENCY_HEAD = (
    "| server | ack p50 ms | ack p99 ms | clean topic p50 ms | clean topic p99 ms "
    "| events seen in the clean topic |"
)
TARGET = "the ingest service at least 0.8x the bare handler's events/s in every case."


def server(name: str, bootstrap: str, topic: str) -> tuple[list[str], dict[str, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")}
    env.update(KAFKA_BOOTSTRAP_SERVERS=bootstrap, PORT=str(SERVER_PORT))
    if name == "bare":
        module = ["bench.ingest_bare", "--bootstrap", bootstrap, "--topic", topic]
        return [sys.executable, "-m", *module, "--port", str(SERVER_PORT)], env
    env.update(DEDUPE_INPUT_TOPIC=topic, DEDUPE_WRITE_KEYS=WRITE_KEY, DEDUPE_LOG_LEVEL="warning")
    return [sys.executable, "-m", "ingest"], env


def cpu_seconds(pid: int) -> float:
    stats = read_stats()
    ticks = sum(stats[p].cpu_ticks for p in descendants(pid, stats))
    return ticks / os.sysconf("SC_CLK_TCK")


async def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited {proc.returncode}")
            try:
                async with s.post(url, data=b"{}") if "/v1/" in url else s.get(url) as r:
                    if r.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f}s")


def start(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


async def throughput(name: str, args: argparse.Namespace, tag: str, logs: Path) -> Cases:
    """Every case against server ``name``: the phase and the server's CPU seconds."""
    topic = f"{tag}-{name}"
    await create_topics(args.bootstrap, [topic], PARTITIONS)
    cmd, env = server(name, args.bootstrap, topic)
    proc = start(cmd, env, logs / f"{name}.log")
    out: Cases = {}
    try:
        await wait_http(f"http://127.0.0.1:{SERVER_PORT}/v1/track", proc)
        for case in CASES:
            before = cpu_seconds(proc.pid)
            phase = await saturate(
                f"http://127.0.0.1:{SERVER_PORT}", case, args.seconds, args.concurrency
            )
            out[case] = (phase, cpu_seconds(proc.pid) - before)
            print(f"  {name} {case}: {phase.rate(phase.events):,.0f} events/s", flush=True)
    finally:
        stop(proc)
    return out


async def latency(
    name: str, args: argparse.Namespace, tag: str, logs: Path
) -> tuple[Phase, list[float]]:
    """Paced single events through server ``name`` and a dedup worker: the phase, and each
    event's seconds from request to the clean topic."""
    topic, clean = f"{tag}-{name}-lat", f"{tag}-{name}-lat-clean"
    await create_topics(args.bootstrap, [topic, clean], PARTITIONS)
    data = Path(tempfile.mkdtemp(prefix="ingest-bench-", dir=ROOT / "data"))
    worker_env = {k: v for k, v in os.environ.items() if not k.startswith("DEDUPE_")}
    worker_env.update(
        KAFKA_BOOTSTRAP_SERVERS=args.bootstrap,
        DEDUPE_APP_ID=f"{tag}-{name}",
        DEDUPE_INPUT_TOPIC=topic,
        DEDUPE_OUTPUT_TOPIC=clean,
        DEDUPE_DLQ_TOPIC=f"{clean}-dlq",
        DEDUPE_PARTITIONS=str(PARTITIONS),
        DEDUPE_DATA_DIR=str(data),
        DEDUPE_WEB_PORT=str(WORKER_WEB_PORT),
    )
    worker = start(
        [sys.executable, "-m", "app", "worker", "-l", "info"],
        worker_env,
        logs / f"{name}-worker.log",
    )
    cmd, env = server(name, args.bootstrap, topic)
    proc = start(cmd, env, logs / f"{name}-lat.log")
    watcher = await Watcher.start(args.bootstrap, clean, PARTITIONS)
    try:
        await wait_http(f"http://127.0.0.1:{WORKER_WEB_PORT}/ready", worker, timeout=300)
        await wait_http(f"http://127.0.0.1:{SERVER_PORT}/v1/track", proc)
        polling = asyncio.ensure_future(poll_until(watcher, args.latency_seconds + 60))
        phase = await paced(
            f"http://127.0.0.1:{SERVER_PORT}",
            args.latency_rate,
            args.latency_seconds,
            watcher.sent_at,
        )
        await polling
        return phase, list(watcher.latencies)
    finally:
        await watcher.stop()
        stop(proc)
        stop(worker)


async def poll_until(watcher: Watcher, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    await asyncio.sleep(1)
    while time.monotonic() < deadline and watcher.sent_at:
        await watcher.poll(100)


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def render(
    results: dict[str, Cases],
    latencies: dict[str, tuple[Phase, list[float]]],
    args: argparse.Namespace,
    cmdline: str,
) -> str:
    lines = [f"Command: `{cmdline}`", "", "Machine: " + ", ".join(machine()), ""]
    lines += [
        f"Throughput: {args.concurrency} clients per case, {args.seconds:g} s each, "
        f"{PARTITIONS} partitions.",
        "",
        THROUGHPUT_HEAD,
        "|---|---|---|---|---|---|---|---|---|",
    ]
    verdicts = []
    for case in CASES:
        limit = results["bare"][case][0].rate(results["bare"][case][0].events)
        for name in SERVERS:
            phase, cpu = results[name][case]
            eps = phase.rate(phase.events)
            vs = ratio(eps, limit)
            per_k = cpu / phase.events * 1e6 if phase.events else None
            lines.append(
                f"| {case} | {SERVERS[name]} | {phase.rate(phase.requests):,.0f} | {eps:,.0f} | "
                f"{'-' if vs is None else f'{vs:.2f}x'} | {ms(phase.ack_ms(50))} | "
                f"{ms(phase.ack_ms(99))} | {ms(per_k)} | {phase.failed} |"
            )
            if name == "ingest":
                met = vs is not None and vs >= 0.8
                verdicts.append(
                    f"- {case}: {'MET' if met else 'NOT MET'} "
                    f"({'-' if vs is None else f'{vs:.2f}x'})"
                )
    lines += [
        "",
        f"Latency: single events at {args.latency_rate:g}/s for {args.latency_seconds:g} s "
        "through a dedup worker (commit interval 100 ms).",
        "",
    ]
    lines += [
        LATENCY_HEAD,
        "|---|---|---|---|---|---|",
    ]
    for name in SERVERS:
        phase, clean = latencies[name]
        lines.append(
            f"| {SERVERS[name]} | {ms(phase.ack_ms(50))} | {ms(phase.ack_ms(99))} | "
            f"{ms(_pct(clean, 50))} | {ms(_pct(clean, 99))} | "
            f"{len(clean):,} of {phase.requests:,} |"
        )
    return "\n".join(
        [*lines, "", "Targets (ingest service vs the bare handler, events/s):", "", *verdicts]
    )


def _pct(values: list[float], q: float) -> float | None:
    value = percentile(values, q)
    return None if value is None else value * 1000


async def main_async(args: argparse.Namespace, cmdline: str) -> None:
    tag = f"ingest-bench-{uuid.uuid4().hex[:6]}"
    logs = ROOT / "data" / "bench-ingest" / tag
    logs.mkdir(parents=True, exist_ok=True)
    print(f"logs in {logs}", flush=True)
    results: dict[str, Cases] = {}
    latencies: dict[str, tuple[Phase, list[float]]] = {}
    for name in SERVERS:
        print(f"{SERVERS[name]}: throughput", flush=True)
        results[name] = await throughput(name, args, tag, logs)
        print(f"{SERVERS[name]}: latency through a worker", flush=True)
        latencies[name] = await latency(name, args, tag, logs)
    text = render(results, latencies, args, cmdline)
    print(text)
    write_latest(args.results, "Ingest benchmark", METHOD, TARGET, text)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    )
    p.add_argument("--seconds", type=float, default=20.0, help="per case and server")
    p.add_argument("--concurrency", type=int, default=32, help="clients posting at once")
    p.add_argument("--latency-rate", type=float, default=200.0, help="events/s of the paced phase")
    p.add_argument("--latency-seconds", type=float, default=15.0)
    p.add_argument("--results", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    given = shlex.join(argv if argv is not None else sys.argv[1:])
    asyncio.run(main_async(args, f"python -m bench.ingest {given}".strip()))


if __name__ == "__main__":
    main()
