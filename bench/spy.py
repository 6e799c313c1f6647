"""py-spy on a benchmark contender (``bench.throughput --py-spy DIR``): collapsed stacks while
it works, and their summary (bench/profile.py) beside them."""

from __future__ import annotations

import asyncio
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from bench.profile import parse, summary


class Spy:
    """``py-spy record`` of one process tree into ``out`` (collapsed stacks), its own command
    line and output appended to ``log``."""

    def __init__(self, out: Path, log: Path) -> None:
        self.out = out
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, pid: int, *, subprocesses: bool) -> None:
        """``subprocesses``: sample the children of ``pid`` (the workers of a launcher)."""
        self.out.parent.mkdir(parents=True, exist_ok=True)
        spy = Path(sys.executable).with_name("py-spy")
        cmd = [str(spy), "record", "--pid", str(pid), "--rate", "100"]
        cmd += ["--nonblocking", "--format", "raw", "--output", str(self.out)]
        if subprocesses:
            cmd.append("--subprocesses")
        with self.log.open("ab") as log:
            log.write(f"$ {shlex.join(cmd)}\n".encode())
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)

    async def stop(self) -> str | None:
        """Stop sampling; the profile's summary (also written to ``out`` with .txt), or None
        when py-spy wrote nothing."""
        proc, self.proc = self.proc, None
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # py-spy writes its output and exits
        for _ in range(60):
            if proc.poll() is not None:
                break
            await asyncio.sleep(0.5)
        else:
            proc.kill()
        if not self.out.exists():
            return None
        with self.out.open() as f:
            text = summary(parse(f))
        self.out.with_suffix(".txt").write_text(text)
        return text
