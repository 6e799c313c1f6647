"""What the scale benchmark (bench/scale.py) reads of the process and of RocksDB: memory
(VmHWM, VmRSS), bytes read, RocksDB's own memory accounting, the machine's description, and
the formatting of those figures."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path


def parse_vm_kib(status_text: str, name: str) -> int:
    """A ``Vm*`` figure of ``/proc/<pid>/status`` in bytes (``VmHWM:  1234 kB``); 0 if absent."""
    for line in status_text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    return 0


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


def memory() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process in bytes."""
    text = Path("/proc/self/status").read_text()
    return parse_vm_kib(text, "VmHWM"), parse_vm_kib(text, "VmRSS")


def read_bytes() -> int:
    """Bytes this process has read so far (``rchar`` of ``/proc/self/io``: from the page cache
    or the disk), so block reads RocksDB does outside its block cache show up."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


def rocksdb_memory(store: object, partitions: int) -> dict[str, int]:
    """RocksDB's own accounting, summed over partitions and column families."""
    totals = {"memtables": 0, "table readers (outside cache)": 0}
    cache_usage = cache_pinned = 0
    for p in range(partitions):
        pdb = store.partition_db(p)  # type: ignore[attr-defined]
        for db in (pdb.db, pdb.meta, *pdb.extra.values()):
            totals["memtables"] += db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
            totals["table readers (outside cache)"] += (
                db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
            )
        cache_usage = pdb.db.property_int_value("rocksdb.block-cache-usage") or 0
        cache_pinned = pdb.db.property_int_value("rocksdb.block-cache-pinned-usage") or 0
    totals["block cache (shared)"] = cache_usage
    totals["block cache pinned"] = cache_pinned
    return totals


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        total = parse_vm_kib(
            Path("/proc/meminfo").read_text().replace("MemTotal:", "VmTotal:"), "VmTotal"
        )
    except OSError:
        total = 0
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("rocksdict", "faust-streaming", "aiokafka")
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores ({cpu}), {total / 2**30:.0f} GiB RAM; "
        f"Python {platform.python_version()}, {versions}"
    )
