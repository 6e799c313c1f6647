"""Scheduled snapshots (``DEDUPE_SNAPSHOT_DIR``): every ``DEDUPE_SNAPSHOT_INTERVAL`` the worker
writes a snapshot of its partition databases into ``<dir>/snapshot-<UTC time, ms>`` and then
deletes the oldest beyond ``DEDUPE_SNAPSHOT_KEEP``.

Each snapshot is taken by a child process running ``python -m app snapshot --to ...``
(app/admin/snapshots.py, the command an operator runs) with the worker's environment: it reads the
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

import asyncio
import logging
import shutil
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from recovery.snapshot import MANIFEST

log = logging.getLogger(__name__)

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
