"""The recovery benchmark's worker processes (bench/recovery.py): their environment, starting
one and timing it to ``GET /ready``, stopping it, the standby takeover, ``python -m app``
commands, and the bulk restorer's own rate from a worker's log."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.recovery_changelog import ROOT

#: The workers' DEDUPE_SESSION_TIMEOUT (seconds; ``--session-timeout``): a killed worker's
#: partitions move after it. 3 s as in the fault tests; the setting's default is 10 s.
SESSION_TIMEOUT = 3.0
RESTORED = re.compile(r"restored \S+ through offset \d+: (\d+) records in ([\d.]+)s")


#: Every worker the benchmark started: :func:`bench.recovery.main` kills those still running
#: when it ends, however it ends (a failed run left a worker running for half an hour).
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
