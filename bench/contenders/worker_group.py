"""Contender (f): our exactly-once worker as N processes in one consumer group on one machine.

    python -m bench.contenders.worker_group --web-ports 6066,6067 --state-dir DIR

Faust scales out by processes: each ``python -m app worker`` of the same ``DEDUPE_APP_ID`` gets
a share of the partitions (and their ``seen_ids`` state). This launcher starts one per
``--web-ports`` entry, with the settings of its own environment (``DEDUPE_*``, as
``bench.throughput`` sets them for (b)), each with its own data dir (``DIR/worker-<i>``) and
web port (the i-th entry), so that the benchmark can measure them as one process tree, as it
measures Spark's ``local[2]`` JVM. SIGTERM or SIGINT is passed on to every worker; it exits
once all have, with the first non-zero exit code, and stops the others when one exits early.

What you should see: each worker's log, prefixed ``[worker-<i>]``, on stdout.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument(
        "--web-ports", required=True, help="comma-separated: one worker per port, e.g. 6066,6067"
    )
    p.add_argument("--state-dir", type=Path, required=True, help="worker i keeps DIR/worker-<i>")
    args = p.parse_args(argv)
    try:
        args.ports = [int(x) for x in args.web_ports.split(",") if x.strip()]
    except ValueError:
        p.error(f"--web-ports {args.web_ports!r}: use comma-separated port numbers")
    if not args.ports or any(not 0 < port < 65536 for port in args.ports):
        p.error(f"--web-ports {args.web_ports!r}: give at least one TCP port")
    return args


def _pump(name: str, proc: subprocess.Popen[bytes]) -> None:
    """Copy a worker's output to ours, line by line, prefixed with its name."""
    assert proc.stdout is not None
    out = sys.stdout.buffer
    prefix = f"[{name}] ".encode()
    for line in proc.stdout:
        out.write(prefix + line)
        out.flush()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    procs: list[subprocess.Popen[bytes]] = []
    for i, port in enumerate(args.ports):
        data_dir = args.state_dir / f"worker-{i}"
        data_dir.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ, DEDUPE_DATA_DIR=str(data_dir), DEDUPE_WEB_PORT=str(port))
        proc = subprocess.Popen(
            [sys.executable, "-m", "app", "worker", "-l", "info"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        procs.append(proc)
        threading.Thread(target=_pump, args=(f"worker-{i}", proc), daemon=True).start()

    def stop(signum: int, _frame: object) -> None:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signum)

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGINT)}
    code = 0
    try:
        while any(proc.poll() is None for proc in procs):
            for i, proc in enumerate(procs):
                rc = proc.poll()
                if rc is not None and rc != 0 and code == 0:
                    code = rc
                    print(f"worker-{i} exited with {rc}: stopping the others", flush=True)
                    stop(signal.SIGTERM, None)
            time.sleep(0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    for proc in procs:
        if proc.returncode and code == 0:
            code = proc.returncode
    return code


if __name__ == "__main__":
    sys.exit(main())
