"""A SIGTERM that reaches ``python -m app worker`` before Faust installed its own handlers (while
the modules import, under a slow start) ends it with exit 0, as a clean stop: the fault tier's
F3 stops a restarted worker at a random moment and once met the default action (-15) there."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]


def catches(pid: int, sig: int) -> bool:
    """Whether the process has a handler for ``sig`` (its SigCgt mask in /proc)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigCgt:"):
            return bool(int(line.split()[1], 16) & (1 << (sig - 1)))
    return False


def test_a_sigterm_during_start_up_exits_0() -> None:
    env = dict(os.environ, KAFKA_BOOTSTRAP_SERVERS="127.0.0.1:9", DEDUPE_DATA_DIR="/nonexistent")
    proc = subprocess.Popen(
        [sys.executable, "-m", "app", "worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 10
    while not catches(proc.pid, signal.SIGTERM):
        assert proc.poll() is None and time.monotonic() < deadline, "no SIGTERM handler"
        time.sleep(0.001)
    proc.send_signal(signal.SIGTERM)  # the imports of Faust and the app take about a second
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "stopped by SIGTERM while starting" in err
