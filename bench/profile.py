"""Summaries of py-spy profiles (``py-spy record --format raw``: collapsed stacks).

    python -m bench.profile data/bench/<run>/dup0_6-b.folded       # top 30 functions
    python -m bench.profile FILE --top 50 --under dedupe_events    # only samples below a frame

``bench.throughput --py-spy DIR`` records one profile per worker contender and writes this
summary next to it (``.txt``). Each line of a raw profile is ``frame;frame;...;frame count``,
outermost first, a frame being ``function (path:line)``. The summary gives, per function
(``function (file)``, line numbers folded together), its share of the samples as the innermost
frame (*self*: where the CPU was) and anywhere in the stack (*total*: what it cost with its
callees), plus the idle share (samples in the event loop's ``select``, i.e. nothing to do).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_LINE = re.compile(r"^(?P<stack>.*) (?P<count>\d+)$")
_FRAME = re.compile(r"^(?P<func>.*?) \((?P<path>[^():]*)(?::\d+)?\)$")
#: Innermost frames that mean the thread was waiting, not working: (method, file).
IDLE = {("select", "selectors.py"), ("poll", "selectors.py"), ("wait", "threading.py")}


def is_idle(name: str) -> bool:
    """``"EpollSelector.select (selectors.py)"`` and the like: a thread waiting for work."""
    func, _, path = name.partition(" (")
    return (func.rsplit(".", 1)[-1], path.rstrip(")")) in IDLE


@dataclass
class Profile:
    samples: int
    self_: Counter[str]
    total: Counter[str]


def frame_name(frame: str) -> str:
    """``"send (aiokafka/producer/producer.py:123)"`` -> ``"send (aiokafka/producer/producer.py)"``;
    site-packages prefixes are dropped so names stay short."""
    m = _FRAME.match(frame.strip())
    if m is None:
        return frame.strip()
    path = m["path"]
    for marker in ("site-packages/", "lib/python3.11/"):
        if marker in path:
            path = path.split(marker, 1)[1]
    return f"{m['func']} ({path})"


def parse(lines: Iterable[str], under: str | None = None) -> Profile:
    """Count samples per function; with ``under``, only stacks holding a frame containing it."""
    self_: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in lines:
        m = _LINE.match(line.rstrip("\n"))
        if m is None:
            continue
        frames = [frame_name(f) for f in m["stack"].split(";") if f]
        if not frames:
            continue
        if under is not None and not any(under in f for f in frames):
            continue
        n = int(m["count"])
        samples += n
        self_[frames[-1]] += n
        for name in set(frames):
            total[name] += n
    return Profile(samples, self_, total)


def summary(profile: Profile, top: int = 30) -> str:
    if profile.samples == 0:
        return "no samples\n"
    idle = sum(n for name, n in profile.self_.items() if is_idle(name))
    out = [
        f"{profile.samples:,} samples; idle (event loop or thread waiting) "
        f"{idle / profile.samples:.1%}",
        "",
        f"{'self':>6}  {'total':>6}  function (innermost frame: self)",
    ]
    for name, n in profile.self_.most_common(top):
        share = n / profile.samples
        out.append(f"{share:6.1%}  {profile.total[name] / profile.samples:6.1%}  {name}")
    out += ["", f"{'total':>6}  {'self':>6}  function (anywhere in the stack: total)"]
    for name, n in profile.total.most_common(top):
        share = n / profile.samples
        out.append(f"{share:6.1%}  {profile.self_[name] / profile.samples:6.1%}  {name}")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("file", type=Path, help="a py-spy raw (collapsed stacks) profile")
    parser.add_argument("--top", type=int, default=30, help="functions per table (30)")
    parser.add_argument("--under", help="only samples whose stack has a frame containing this")
    args = parser.parse_args(argv)
    with args.file.open() as f:
        print(summary(parse(f, args.under), args.top), end="")


if __name__ == "__main__":
    main()
