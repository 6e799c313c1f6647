"""The machine and versions a benchmark ran on, for its results file."""

from __future__ import annotations

import contextlib
import os
import platform
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


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
