"""What only the worker's settings as a whole can check (ranges and choices of single fields
are declared on the fields, ``app/settings/__init__.py``): topic names and their clashes, the bucket
within the window, replication counts, fault specs, log level, source policies, the native
decoder when it is required."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from adapters import fetched_records
from app.strategy import parse_policies, parse_window_from
from envsettings import count_problem, parse_count

if TYPE_CHECKING:
    from app.settings import Settings

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
_TOPICS = ("app_id", "input_topic", "output_topic", "dlq_topic", "repartition_topic")


def cross_checks(s: Settings) -> list[str]:
    out: list[str] = []

    env = s.env_of
    if not s.bootstrap_servers.strip():
        out.append(f"{env('bootstrap_servers')} must name at least one broker")
    for name in _TOPICS:
        value = getattr(s, name)
        if not _TOPIC.match(value):
            out.append(f"{env(name)}={value!r}: use 1-200 of [A-Za-z0-9._-]")
    names = {n: getattr(s, n) for n in _TOPICS[1:]}
    if len(set(names.values())) != len(names):
        listed = ", ".join(f"{env(n)}={v!r}" for n, v in names.items())
        out.append(f"input, output, dead-letter and repartition topics must differ: {listed}")
    if s.native_records == "on" and fetched_records.load() is None:
        out.append(
            f"{env('native_records')}=on but the native module (dedupe_native) is not "
            "installed: build it with `make install` (needs cargo), or set auto or off"
        )
    if 1 <= s.window <= 3650 * 86400 and not 0.001 <= s.bucket <= s.window:
        out.append(f"{env('bucket')}={s.bucket}s: must be 1ms..DEDUPE_WINDOW")
    for name in ("replication_factor", "min_insync_replicas"):
        if problem := count_problem(env(name), getattr(s, name), 32):
            out.append(problem)
    if not count_problem("", s.replication_factor, 32) and not count_problem(
        "", s.min_insync_replicas, 32
    ):
        replication, min_insync = (
            parse_count(s.replication_factor),
            parse_count(s.min_insync_replicas),
        )
        if replication is not None and min_insync is not None and min_insync > replication:
            out.append(
                f"{env('min_insync_replicas')}={min_insync} is more than "
                f"{env('replication_factor')}={replication}: no acks=all write could succeed"
            )
    if s.log_level.lower() not in {"debug", "info", "warning", "error", "critical"}:
        out.append(f"{env('log_level')}={s.log_level!r}: debug|info|warning|error|critical")
    try:
        parse_policies(s.source_policies)
    except ValueError as exc:
        out.append(f"{env('source_policies')}={s.source_policies!r}: {exc}")
    try:
        parse_window_from(s.source_window_from)
    except ValueError as exc:
        out.append(f"{env('source_window_from')}={s.source_window_from!r}: {exc}")
    return out
