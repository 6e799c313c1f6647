"""``python -m app plan``: how big a pipeline must be for its traffic.

    python -m app plan --new-ids-per-second 5000 --window 7d --id-shape uuid \\
        --partitions 8 --workers 8

prints, per partition and in total, the ids held, the disk of RocksDB, the changelog, the
memory, the restore time, the effective window the size cap allows and each worker's
throughput headroom; when the cap would shorten the window, the partitions or the cap that
keep it; and the fewest partitions for the event rate. The figures are measured by our
benchmarks (``app/admin/capacity/figures.json`` cites each one); the formulas are in
docs/operations.md ("Sizing a pipeline"). Options not given take the worker's defaults
(docs/settings.md), not the environment, so the same command prints the same plan anywhere.
Exit status 2, with every problem listed, when an option is invalid.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import fields

from app.admin.capacity.figures import Figure, load
from app.admin.capacity.model import UUID_ON_DISK, Load, Plan, plan
from app.settings import Settings
from envsettings import parse_duration
from tables.keys import to_disk

#: An id of each shape. ``ajs``: analytics-next's messageId, "ajs-next-<epoch ms>-<uuid>"
#: (segmentio/analytics-next, packages/browser/src/core/events).
_EXAMPLES = {
    "uuid": b"0f8fad5b-d9cb-469f-a165-70867728950e",
    "ajs": b"ajs-next-1700000000000-0f8fad5b-d9cb-469f-a165-70867728950e",
}
#: Id shapes: (length in characters, bytes on disk), the latter as the store packs them
#: (``tables/keys.py``), so the plan follows the key forms.
SHAPES = {name: (len(text), len(to_disk(text))) for name, text in _EXAMPLES.items()}


def _default(name: str) -> object:
    return next(f.default for f in fields(Settings) if f.name == name)


def _duration(text: str) -> float:
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m app plan", description=__doc__.split("\n\n")[0])
    p.add_argument("--new-ids-per-second", type=float, help="distinct new ids per second")
    p.add_argument("--events-per-second", type=float, help="all events per second")
    p.add_argument("--repeat-share", type=float, help="share of events that are repeats (0..1)")
    p.add_argument("--window", type=_duration, default=_default("window"), help="DEDUPE_WINDOW")
    p.add_argument(
        "--id-shape",
        default="uuid",
        help="uuid (canonical lowercase, 17 bytes on disk), ajs (analytics-next's "
        "ajs-next-<ms>-<uuid>, 59 characters, 23 bytes on disk) or text:N (other ASCII ids of "
        "N characters, as written)",
    )
    p.add_argument("--partitions", type=int, default=_default("partitions"))
    p.add_argument("--workers", type=int, help="worker processes (default: one per partition)")
    p.add_argument("--max-ids-per-partition", type=int, default=_default("max_ids_per_partition"))
    p.add_argument("--min-window", type=_duration, default=_default("min_window"))
    p.add_argument("--allowed-lateness", type=_duration, default=_default("allowed_lateness"))
    p.add_argument("--bucket", type=_duration, default=_default("bucket"), help="0: derived")
    p.add_argument("--replication", type=int, default=3, help="changelog replicas (3)")
    return p


def load_from(args: argparse.Namespace) -> tuple[Load | None, list[str]]:
    """The load the options describe, or every problem with them."""
    problems = []
    new, events, share = args.new_ids_per_second, args.events_per_second, args.repeat_share
    if share is not None and not 0 <= share < 1:
        problems.append("--repeat-share must be at least 0 and below 1")
    elif new is None and events is None:
        problems.append("give --new-ids-per-second, or --events-per-second (and --repeat-share)")
    elif new is None:
        new = events * (1 - (share or 0.0))
    elif events is None:
        events = new / (1 - share) if share else new
    if new is not None and events is not None and not 0 < new <= events:
        problems.append("new ids per second must be above 0 and at most the events per second")
    shape = SHAPES.get(args.id_shape)
    if shape is None and args.id_shape.startswith("text:") and args.id_shape[5:].isdigit():
        shape = (int(args.id_shape[5:]),) * 2
    if shape is None or shape[0] < 1:
        problems.append(f"--id-shape {args.id_shape!r}: use uuid, ajs or text:N (N characters)")
    workers = args.workers or args.partitions
    for name, value in (
        ("--partitions", args.partitions),
        ("--workers", workers),
        ("--max-ids-per-partition", args.max_ids_per_partition),
        ("--replication", args.replication),
        ("--window", args.window),
    ):
        if value <= 0:
            problems.append(f"{name} must be above 0")
    if problems:
        return None, problems
    assert new is not None and events is not None and shape is not None
    return Load(
        new,
        events,
        args.window,
        args.allowed_lateness,
        args.bucket,
        shape[0],
        shape[1],
        args.partitions,
        workers,
        args.max_ids_per_partition,
        args.min_window,
        args.replication,
    ), []


def size(n: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:,.1f} {unit}"
    return f"{n:,.0f} B"


def span(seconds: float) -> str:
    for unit, scale in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= scale:
            return f"{seconds / scale:,.1f} {unit}"
    return f"{seconds:,.1f} s"


def render(load: Load, pl: Plan, figures: dict[str, Figure]) -> str:
    p, w = load.partitions, min(load.workers, load.partitions)
    shape = f"{load.id_length} characters, {load.disk_key_bytes} bytes on disk"
    if (load.id_length, load.disk_key_bytes) == SHAPES["uuid"]:
        shape = f"uuid, {UUID_ON_DISK} bytes on disk"
    row = "  {:<34}{:>22}{:>22}".format
    held = f"{pl.ids_held_per_partition:,.0f}" + (" (cap)" if pl.capped else "")
    lines = [
        f"Sizing: {load.new_ids_per_second:,.0f} new ids/s in {load.events_per_second:,.0f} "
        f"events/s; window {span(load.window)} (+ lateness {span(load.allowed_lateness)}); "
        f"ids: {shape}; {p} partitions, {load.workers} workers; cap "
        f"{load.cap:,} ids per partition",
        "",
        row("", "per partition", f"total ({p} partitions)"),
        row("new ids/s", f"{pl.new_ids_per_partition:,.1f}", f"{load.new_ids_per_second:,.1f}"),
        row("ids held", held, f"{pl.ids_held_per_partition * p:,.0f}"),
        row(
            "  needed for the whole window",
            f"{pl.ids_needed_per_partition:,.0f}",
            f"{pl.ids_needed_per_partition * p:,.0f}",
        ),
        row("disk, RocksDB", size(pl.disk_per_partition), size(pl.disk_per_partition * p)),
        row(
            "changelog, one replica",
            size(pl.changelog_per_partition),
            size(pl.changelog_per_partition * p),
        ),
        row(
            f"changelog, {load.replication} replicas",
            "",
            size(pl.changelog_per_partition * p * load.replication),
        ),
        row("restore from the changelog", span(pl.restore_seconds_per_partition), ""),
        row("effective window", span(pl.effective_window), ""),
        "",
        f"Per worker (the busiest of {w} holds {pl.partitions_per_worker} partitions): memory "
        f"{size(pl.memory_per_worker)} (bounded by the RocksDB settings, not by the ids held; "
        f"total {size(pl.memory_per_worker * w)}), restore {span(pl.restore_seconds_per_worker)}, "
        f"load {pl.busiest_worker_events:,.0f} events/s of "
        f"{figures['worker_events_per_second'].value:,.0f} measured: headroom "
        f"{pl.headroom:,.1f}x.",
        f"Fewest partitions for {load.events_per_second:,.0f} events/s: "
        f"{pl.min_partitions_for_rate} (a partition is one worker's, on one core).",
    ]
    if pl.capped:
        lines.append(
            f"WARNING: the cap holds {load.cap:,} ids per partition, "
            f"{pl.new_ids_per_partition:,.1f} new ids/s fill it in {span(pl.effective_window)}: "
            "repeats older than that are forwarded again"
            + (
                f", under DEDUPE_MIN_WINDOW ({span(min(load.min_window, load.window))})."
                if pl.short
                else "."
            )
        )
        lines.append(
            f"  To keep the whole {span(load.window)}: {pl.partitions_for_window} partitions "
            f"at this cap, or DEDUPE_MAX_IDS_PER_PARTITION={pl.cap_for_window} with {p} "
            f"partitions ({size(pl.cap_for_window * pl.disk_bytes_per_id)} of RocksDB each)."
        )
    else:
        lines.append(
            f"The cap keeps the whole window: {pl.ids_held_per_partition / load.cap:.0%} "
            "of it is used."
        )
    if pl.eviction_too_slow:
        lines.append(
            f"WARNING: at the cap each partition evicts at most "
            f"{figures['evictions_per_second_at_cap'].value:,.0f} ids/s, fewer than it takes: "
            f"use at least {pl.min_partitions_for_eviction} partitions."
        )
    if pl.headroom < 1:
        lines.append(
            f"WARNING: the busiest worker gets more events than it processes: use "
            f"at least {pl.min_partitions_for_rate} partitions and workers."
        )
    measured = figures["largest_partition_measured"].value
    if pl.ids_held_per_partition > measured:
        lines.append(
            f"Note: {pl.ids_held_per_partition:,.0f} ids per partition is "
            f"{pl.ids_held_per_partition / measured:,.1f}x the most the benchmarks measured "
            f"({measured:,.0f}): disk and memory are extrapolated (bytes per id held after "
            "compaction, caches bounded by settings); `python -m bench.scale --partitions 1 "
            f"--ids {pl.ids_held_per_partition:.0f}` measures one such partition."
        )
    lines += ["", "From these measured figures (docs/operations.md, 'Sizing a pipeline'):"]
    used = f"{pl.disk_bytes_per_id:.1f} bytes/id"
    extra = load.disk_key_bytes - UUID_ON_DISK
    if extra > 0:
        used += f" (at most: + {extra} bytes of key)"
    notes = {
        "disk_bytes_per_uuid_id": used,
        "changelog_bytes_per_uuid_id": f"{pl.changelog_bytes_per_id:.1f} bytes/id for these ids",
    }
    for name, fig in figures.items():
        note = f"; used: {notes[name]}" if name in notes else ""
        lines.append(f"  {fig.value:,g} {fig.unit}: {fig.meaning}{note} [{fig.cited}]")
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    load_, problems = load_from(args)
    if load_ is None:
        print("dedupe plan: " + "; ".join(problems), file=sys.stderr)
        return 2
    figures = load()
    print(render(load_, plan(load_, figures), figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
