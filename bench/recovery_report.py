"""The recovery benchmark's results (bench/recovery.py): one timed run per mode, and the
results text written to bench/results-recovery.md."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime

from bench.machine import machine, versions


@dataclass
class Run:
    mode: str
    ready_s: float | None
    restore_s: float | None = None
    logged_rate: float | None = None

    def rate(self, ids: int) -> float | None:
        if self.restore_s is None or self.restore_s <= 0:
            return None
        return ids / self.restore_s


def render(args: argparse.Namespace, runs: list[Run], sizes: dict[str, float], cmdline: str) -> str:
    by = {r.mode: r for r in runs}
    lines = [
        f"## Recovery benchmark, {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        "",
        f"`{cmdline}`: {args.ids:,} {'random UUID-shaped' if args.uuids else 'numbered'} ids "
        f"in {args.partitions} partitions, {args.txn:,} records per transaction.",
        "",
        "| run | ready after (s) | restore (s) | records/s | vs limit |",
        "|---|---|---|---|---|",
    ]
    limit_rate = by["limit"].rate(args.ids)
    for r in runs:
        rate = (
            r.rate(args.ids) if r.mode in ("limit", "reader", "bulk", "quix", "kstreams") else None
        )
        vs_limit = f"{rate / limit_rate:.2f}x" if rate and limit_rate else ""
        ready = "" if r.ready_s is None else f"{r.ready_s:.1f}"
        restore = "" if r.restore_s is None else f"{max(r.restore_s, 0.0):.1f}"
        shown = f"{rate:,.0f}" if rate else ""
        lines.append(f"| {r.mode} | {ready} | {restore} | {shown} | {vs_limit} |")
    bulk = by["bulk"]
    lines += [
        "",
        "- limit: a bare aiokafka consumer (read_committed, the restorer's fetch sizes) reading "
        "the changelog, writing nothing; reader: the restorer's own reader "
        "(recovery/reader.py) reading it, writing nothing",
        "- quix: Quix Streams (the throughput benchmark's exactly-once contender) rebuilding its "
        "RocksDB state of the same ids from its own changelog on an empty state dir (its log's "
        "recovery start to end)"
        if "quix" in by
        else "- quix: not run (--skip-quix)",
        "- kstreams: Kafka Streams (the throughput benchmark's contender (g), exactly_once_v2) "
        "restoring its RocksDB window store of the same ids from its own changelog on an empty "
        "state dir (RocksDB write batches with the WAL off), from its restore listener's first "
        "start to last end"
        if "kstreams" in by
        else "- kstreams: not run (--skip-kstreams)",
        f"- the bulk restorer's own figure (its log: records over its restore time): "
        f"{bulk.logged_rate:,.0f} records/s"
        if bulk.logged_rate
        else "- no bulk figure logged",
        f"- the changelog on the broker's disk (its log segments; {args.compression} batches): "
        f"{sizes['changelog bytes per id']:.1f} bytes per id"
        if "changelog bytes per id" in sizes
        else "- the changelog's size: not measured (the broker is not the local one)",
        f"- data dir after the bulk restore: {sizes['data dir bytes per id']:.1f} bytes per id "
        "(the restore compacts level 0 before the worker is ready)",
        f"- snapshot of the running worker (`python -m app snapshot`): "
        f"{sizes['snapshot seconds']:.1f}s, {sizes['snapshot bytes per id']:.1f} bytes per id; "
        f"`restore` into a new data dir: {sizes['restore seconds']:.1f}s (both include the "
        "start of a Python process); from-snapshot: a worker started on it",
        f"- standby takeover: a second worker (`DEDUPE_STANDBY_REPLICAS=1`) joins the restarted "
        f"one; once its standby copies are caught up the first is killed (kill -9); the second "
        f"is ready with every partition {sizes['takeover seconds']:.1f}s after the kill, the "
        f"session timeout ({sizes['session timeout']:g}s) included, having restored "
        f"{sizes['takeover offsets']:,.0f} changelog offsets (of {args.ids:,})",
        "- machine: " + "; ".join(machine()),
        "- versions: " + "; ".join(versions()),
        "",
    ]
    return "\n".join(lines)
