"""``python -m app snapshot --to DIR`` and ``python -m app restore --from DIR``: move a worker's
state to another machine as files (``recovery/snapshot.py``) instead of rebuilding it from the
changelog.

    python -m app snapshot --to /backups/dedupe-2026-11-25      # the worker may keep running
    python -m app restore --from /backups/dedupe-2026-11-25     # into an empty DEDUPE_DATA_DIR

Both read the worker's settings from the environment (the same ``DEDUPE_*`` variables). You
should see one line per partition database (keys, changelog offset) and a last line with the
total. A worker started on the restored data dir reads only the changelog after each
partition's offset. ``restore`` refuses, listing every problem, a snapshot of another pipeline
(app id, input topic, partitions), one with a file missing, truncated or changed, or one older
than the changelogs' ``delete.retention.ms`` (read from the broker; after it a compacted
changelog may have dropped deletes the snapshot does not know of; ``--max-age`` sets the limit
without asking the broker). Exit status 0 on success, 1 when refused, 2 on bad settings or
arguments, or when the broker cannot say the retention.

Scheduled snapshots (``DEDUPE_SNAPSHOT_DIR``): every ``DEDUPE_SNAPSHOT_INTERVAL`` the worker
writes a snapshot of its partition databases into ``<dir>/snapshot-<UTC time, ms>`` and then
deletes the oldest beyond ``DEDUPE_SNAPSHOT_KEEP``.

Each snapshot is taken by a child process running ``python -m app snapshot --to ...`` (the
command above, as an operator runs it) with the worker's environment: it reads the
databases read-only, so the stream goes on, and its CPU work runs beside the worker's event
loop, not in it. A failed snapshot leaves no directory (the command removes it) and is logged
as an error; the next one is tried an interval later. Restore one with
``python -m app restore --from <dir>/snapshot-...`` (docs/operations.md).

Retention of the directory: the newest ``DEDUPE_SNAPSHOT_KEEP`` complete snapshots (those with
a manifest). A ``snapshot-*`` directory without a manifest (one cut short by a kill of the
worker) is deleted at the next prune. Nothing else in the directory is touched.

What you should see in the worker's log, once per interval::

    scheduled snapshot of 4 partition databases in
    data/snapshots/snapshot-20261126T013000.052Z (1.9s); 3 kept, 1 deleted
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from faust.types.settings import Settings as FaustSettings

from app.admin.topics import TopicMismatch, delete_retention_ms
from app.settings import Settings
from envsettings import parse_duration
from recovery.snapshot import MANIFEST, Identity, Manifest, problems, restore, take
from tables.formats import FormatRefused
from tables.protocol import changelog_topic
from tables.rocks import PartitionDB, options_for
from tables.seen_ids.table import TABLE_NAME, rocks_tuning

log = logging.getLogger(__name__)


def tables_dir(settings: Settings) -> Path:
    """Where the worker keeps its partition databases: Faust's ``tabledir`` of the worker's app
    (``app/worker/factory.py`` gives it the app id and ``datadir``), worked out by Faust's own
    settings class, not by building the worker (the admin commands depend on no worker module)."""
    tabledir: Path = FaustSettings(settings.app_id, datadir=str(settings.data_dir)).tabledir
    return tabledir


def identity(settings: Settings) -> Identity:
    return Identity(settings.app_id, settings.input_topic, settings.partitions)


def snapshot_tables(src: Path) -> list[str]:
    """The tables a snapshot holds (the seen ids' when its manifest is unreadable: the
    restore then refuses it anyway)."""
    try:
        manifest = Manifest.decode((src / MANIFEST).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return [TABLE_NAME]
    return sorted({copy.table for copy in manifest.copies}) or [TABLE_NAME]


async def tombstone_retention_s(settings: Settings, tables: list[str]) -> float:
    """How long the tables' changelogs keep a delete (the shortest ``delete.retention.ms``):
    a snapshot older than that may miss deletes the compacted changelog no longer has."""
    retentions = [
        await delete_retention_ms(settings, changelog_topic(settings.app_id, table))
        for table in tables
    ]
    return min(retentions) / 1000


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m app", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    snap = sub.add_parser("snapshot", help="write the worker's state into a new directory")
    snap.add_argument("--to", type=Path, required=True, help="the snapshot directory (new)")
    rest = sub.add_parser("restore", help="restore a snapshot into an empty data dir")
    rest.add_argument("--from", dest="src", type=Path, required=True, help="a snapshot directory")
    rest.add_argument(
        "--max-age",
        default=None,
        help="refuse older snapshots (a duration: 90s, 12h, 7d); default: the changelogs' "
        "delete.retention.ms, read from the broker",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    where = tables_dir(settings)
    started = time.monotonic()
    if args.command == "snapshot":
        try:
            manifest = take(where, args.to, identity(settings), progress=print)
        except (ValueError, FileExistsError) as exc:
            print(f"dedupe snapshot: {exc}", file=sys.stderr)
            return 1
        except Exception as exc:  # RocksDB's errors (a file gone under a busy worker)
            shutil.rmtree(args.to, ignore_errors=True)
            print(f"dedupe snapshot: failed ({exc}); nothing kept, try again", file=sys.stderr)
            return 1
        print(
            f"snapshot of {len(manifest.copies)} partition databases in {args.to} "
            f"({time.monotonic() - started:.1f}s)"
        )
        return 0
    if args.max_age is not None:
        try:
            max_age = parse_duration(args.max_age)
        except ValueError as exc:
            print(f"dedupe restore: --max-age: {exc}", file=sys.stderr)
            return 2
    else:
        try:
            max_age = asyncio.run(tombstone_retention_s(settings, snapshot_tables(args.src)))
        except TopicMismatch as exc:
            print(
                f"dedupe restore: {exc}; --max-age sets the limit without asking the broker",
                file=sys.stderr,
            )
            return 2
        print(f"the changelogs keep deletes for {max_age:,.0f}s (delete.retention.ms)")
    found = problems(args.src, identity(settings), max_age)
    if found:
        print(f"dedupe restore: refused, {args.src}:", file=sys.stderr)
        for problem in found:
            print(f"  - {problem}", file=sys.stderr)
        return 1
    options, family_options, _cache = options_for(rocks_tuning(settings))

    def open_db(path: Path, extra: tuple[str, ...]) -> PartitionDB:
        return PartitionDB(path, options, family_options, extra)

    try:
        manifest = restore(args.src, where, open_db, progress=print)
    except (ValueError, FormatRefused) as exc:
        print(f"dedupe restore: {exc}", file=sys.stderr)
        return 1
    print(
        f"restored {len(manifest.copies)} partition databases into {where} "
        f"({time.monotonic() - started:.1f}s); start the worker"
    )
    return 0


# -- scheduled snapshots (DEDUPE_SNAPSHOT_DIR) ----------------------------------------------------

PREFIX = "snapshot-"


def snapshot_name(now: datetime) -> str:
    """The directory name of a snapshot taken at ``now`` (sorts by time)."""
    utc = now.astimezone(UTC)
    return f"{PREFIX}{utc:%Y%m%dT%H%M%S}.{utc.microsecond // 1000:03d}Z"


def scheduled(root: Path) -> tuple[list[Path], list[Path]]:
    """The scheduled snapshots in ``root``, oldest first: (complete, cut short)."""
    dirs = sorted(p for p in root.glob(f"{PREFIX}*") if p.is_dir())
    complete = [p for p in dirs if (p / MANIFEST).is_file()]
    return complete, [p for p in dirs if p not in complete]


def to_delete(root: Path, keep: int) -> list[Path]:
    """The scheduled snapshots in ``root`` to delete: the complete ones older than the newest
    ``keep``, and every one without a manifest (cut short)."""
    complete, cut_short = scheduled(root)
    return complete[: max(len(complete) - keep, 0)] + cut_short


class SnapshotSchedule:
    """Takes one snapshot per call of :meth:`take` (a Faust timer calls it every interval)."""

    def __init__(self, root: Path, keep: int) -> None:
        self.root = root
        self.keep = keep

    async def take(self) -> Path | None:
        """Write one snapshot and prune; the snapshot's path, or None when it failed."""
        self.root.mkdir(parents=True, exist_ok=True)
        dest = self.root / snapshot_name(datetime.now(UTC))
        started = time.monotonic()
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "app",
            "snapshot",
            "--to",
            str(dest),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            out, err = await child.communicate()
        except asyncio.CancelledError:  # the worker stops: no snapshot outlives it
            child.kill()
            await child.wait()
            shutil.rmtree(dest, ignore_errors=True)
            raise
        if child.returncode != 0:
            reason = (err or out).decode(errors="replace").strip().splitlines()
            log.error(
                "scheduled snapshot %s failed (exit %s after %.1fs): %s",
                dest,
                child.returncode,
                time.monotonic() - started,
                reason[-1] if reason else "no output",
            )
            shutil.rmtree(dest, ignore_errors=True)
            return None
        deleted = to_delete(self.root, self.keep)
        for old in deleted:
            shutil.rmtree(old, ignore_errors=True)
        lines = out.decode(errors="replace").strip().splitlines()
        log.info(
            "scheduled %s; %d kept, %d deleted",
            lines[-1] if lines else f"snapshot in {dest}",
            len(scheduled(self.root)[0]),
            len(deleted),
        )
        return dest
