"""Pure measuring helpers of the contender benchmark: percentiles, ratios, /proc and du.

Everything here is a plain function of its inputs (``proc`` is the /proc directory, so tests
can hand in a fake one); ``bench/throughput.py`` does the running.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")


def percentile(values: Sequence[float], q: float) -> float | None:
    """The ``q``-th percentile (0..100) with linear interpolation between closest ranks
    (numpy's default); None for no values."""
    if not 0 <= q <= 100:
        raise ValueError(f"percentile {q} is outside 0..100")
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def ratio(value: float | None, base: float | None) -> float | None:
    """``value / base``, or None when either is unknown or the base is not positive."""
    if value is None or base is None or base <= 0:
        return None
    return value / base


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the benchmark uses."""

    pid: int
    ppid: int
    #: user + system CPU time, in clock ticks
    cpu_ticks: int


def parse_stat(text: str) -> ProcStat:
    """Parse one ``/proc/<pid>/stat`` line. The command name (field 2) is in parentheses and
    may itself contain spaces and parentheses, so the fields after it are found from the last
    ``)``: state is field 3, ppid field 4, utime field 14, stime field 15 (proc(5))."""
    pid_text, _, rest = text.partition(" (")
    after = rest[rest.rindex(")") + 2 :].split()
    # after[0] is field 3 (state), so field n is after[n - 3]
    return ProcStat(
        pid=int(pid_text), ppid=int(after[1]), cpu_ticks=int(after[11]) + int(after[12])
    )


def parse_rss_bytes(status_text: str) -> int:
    """Resident set size from ``/proc/<pid>/status`` (``VmRSS:  1234 kB``); 0 when absent
    (kernel threads, zombies)."""
    for line in status_text.splitlines():
        if line.startswith("VmRSS:"):
            parts = line.split()
            unit = parts[2].lower() if len(parts) > 2 else "kb"
            scale = {"kb": 1024, "mb": 1024 * 1024, "b": 1}.get(unit, 1024)
            return int(parts[1]) * scale
    return 0


def read_stats(proc: Path = PROC) -> dict[int, ProcStat]:
    """Every process's stat (processes that vanish while reading are skipped)."""
    out: dict[int, ProcStat] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            out[int(entry.name)] = parse_stat((entry / "stat").read_text())
        except (OSError, ValueError, IndexError):
            continue
    return out


def descendants(root: int, stats: dict[int, ProcStat]) -> list[int]:
    """``root`` and every process below it (by parent pid), root first."""
    children: dict[int, list[int]] = {}
    for st in stats.values():
        children.setdefault(st.ppid, []).append(st.pid)
    tree: list[int] = []
    todo = [root] if root in stats else []
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(sorted(children.get(pid, ()), reverse=True))
    return tree


@dataclass(frozen=True, slots=True)
class TreeSample:
    """One look at a process tree: its processes, their summed RSS, each one's CPU seconds."""

    pids: tuple[int, ...]
    rss_bytes: int
    cpu_by_pid: dict[int, float]

    @property
    def cpu_seconds(self) -> float:
        return sum(self.cpu_by_pid.values())


def sample_tree(root: int, proc: Path = PROC, ticks_per_second: int | None = None) -> TreeSample:
    """RSS and CPU (user + system) summed over ``root`` and its descendants, now."""
    hz = ticks_per_second or os.sysconf("SC_CLK_TCK")
    stats = read_stats(proc)
    pids = descendants(root, stats)
    rss = 0
    for pid in pids:
        try:
            rss += parse_rss_bytes((proc / str(pid) / "status").read_text())
        except OSError:
            continue
    return TreeSample(tuple(pids), rss, {p: stats[p].cpu_ticks / hz for p in pids})


class TreeCpu:
    """CPU seconds of a process tree over time, including children that already exited.

    A child's ticks disappear from /proc when it exits (they move to its parent's cutime,
    only once reaped), so the last ticks seen of each pid are kept and summed.
    """

    def __init__(self) -> None:
        self._last: dict[int, float] = {}

    def update(self, per_pid_seconds: dict[int, float]) -> float:
        for pid, seconds in per_pid_seconds.items():
            self._last[pid] = max(seconds, self._last.get(pid, 0.0))
        return self.total

    @property
    def total(self) -> float:
        return sum(self._last.values())


def disk_bytes(path: Path) -> int:
    """Bytes on disk under ``path`` (allocated blocks, like ``du -s --block-size=1``)."""
    if not path.exists():
        return 0
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
            except OSError:
                continue
    return total


def events_per_second(events: int, seconds: float | None) -> float | None:
    if seconds is None or seconds <= 0:
        return None
    return events / seconds
