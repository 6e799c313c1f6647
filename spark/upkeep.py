"""Upkeep of the lake's Delta tables: compaction (OPTIMIZE, optional Z-order) and VACUUM.

    python -m spark.upkeep optimize      # or `make lake-optimize`
    python -m spark.upkeep vacuum        # or `make lake-vacuum`
    python -m spark.upkeep vacuum --dry-run

Both are safe while the job runs (same environment as the job; ``--lake`` overrides the lake):

- ``optimize`` rewrites each date's small files (one or more per micro-batch) into few large
  ones, and with ``DEDUPE_LAKE_ZORDER_BY`` (e.g. ``userId``) sorts the events' rows along those
  columns so a query filtering on them skips most files. It is one Delta commit per table that
  replaces files without changing rows (``dataChange=false``): readers see the table before or
  after it, never both or neither, and the job's appends do not conflict with it (a MERGE of
  ``DEDUPE_LAKE_WRITE=merge`` that loses the race is run again). The replaced files stay on disk
  for readers of older versions.
- ``vacuum`` deletes files the current version does not use (replaced by ``optimize``, or left
  by interrupted batches) once older than ``DEDUPE_LAKE_VACUUM_RETENTION`` (7 days; at least 1h,
  so files of a batch being written, which no version lists yet, are never deleted). After it,
  time travel to versions older than the retention no longer works.

You should see::

    lake-optimize: events: 412 files -> 3 in 14.2s (version 57 -> 58)
    lake-optimize: event_counts: 40 files -> 2 in 3.1s (version 20 -> 21)
    lake-vacuum: events: deleted 410 of 413 files on disk (unused and older than 7d)
    lake-vacuum: event_counts: deleted 40 of 42 files on disk (unused and older than 7d)

Exit status: 0; 2 when neither table exists yet, the lake is not Delta
(``DEDUPE_LAKE_FORMAT=parquet``) or a setting is invalid.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TypeVar

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import SparkSession

from spark.jars import JarsMissingError
from spark.lake import data_file_names, delta_commits, is_concurrent_conflict
from spark.session import SparkVersionError, build_session
from spark.settings import DELTA, SparkSettings, SparkSettingsError

T = TypeVar("T")
#: How often an OPTIMIZE is tried when a concurrent commit conflicts with it.
ATTEMPTS = 5
#: Delta refuses a VACUUM retention below this unless its check is turned off.
DELTA_DEFAULT_RETENTION = 7 * 86400.0


@dataclass(frozen=True)
class OptimizeResult:
    table: str
    files_before: int
    files_after: int
    version_before: int
    version_after: int
    seconds: float

    def line(self) -> str:
        return (
            f"{self.table}: {self.files_before} files -> {self.files_after} in "
            f"{self.seconds:.1f}s (version {self.version_before} -> {self.version_after})"
        )


@dataclass(frozen=True)
class VacuumResult:
    table: str
    on_disk_before: int
    on_disk_after: int
    retention: str

    def line(self) -> str:
        deleted = self.on_disk_before - self.on_disk_after
        return (
            f"{self.table}: deleted {deleted} of {self.on_disk_before} files on disk "
            f"(unused and older than {self.retention})"
        )


def table_files(spark: SparkSession, path: str) -> tuple[int, int]:
    """(files in the current version, that version) of the Delta table at ``path``."""
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{path}`").first()
    version = DeltaTable.forPath(spark, path).history(1).select("version").first()
    assert detail is not None and version is not None
    return int(detail["numFiles"]), int(version["version"])


def _retrying(action: Callable[[], T], label: str) -> T:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return action()
        except (CapturedException, Py4JJavaError) as exc:
            if attempt == ATTEMPTS or not is_concurrent_conflict(exc):
                raise
            print(f"{label}: lost a race with a concurrent commit, again", file=sys.stderr)
            time.sleep(0.5 * attempt)
    raise AssertionError("unreachable")


def optimize_table(
    spark: SparkSession, path: str, zorder_by: list[str] | None = None
) -> OptimizeResult:
    """Compact the Delta table at ``path`` (and Z-order it by ``zorder_by`` when given)."""
    started = time.monotonic()
    files_before, version_before = table_files(spark, path)

    def run() -> None:
        builder = DeltaTable.forPath(spark, path).optimize()
        if zorder_by:
            builder.executeZOrderBy(*zorder_by)
        else:
            builder.executeCompaction()

    _retrying(run, f"optimize {path}")
    files_after, version_after = table_files(spark, path)
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return OptimizeResult(
        name,
        files_before,
        files_after,
        version_before,
        version_after,
        time.monotonic() - started,
    )


def vacuum_table(
    spark: SparkSession, path: str, retention_seconds: float, *, dry_run: bool = False
) -> VacuumResult | list[str]:
    """Delete files the table at ``path`` no longer uses, older than ``retention_seconds``.

    Below Delta's own minimum (7 days) its retention check is turned off for this call; the
    settings never go below 1 hour (a test may, on a table no job writes).
    """
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(check, str(retention_seconds >= DELTA_DEFAULT_RETENTION).lower())
    hours = retention_seconds / 3600
    if dry_run:
        listed = spark.sql(f"VACUUM delta.`{path}` RETAIN {hours:f} HOURS DRY RUN").collect()
        return [str(row[0]) for row in listed]
    before = len(data_file_names(spark, path))
    DeltaTable.forPath(spark, path).vacuum(hours)
    after = len(data_file_names(spark, path))
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return VacuumResult(name, before, after, _duration(retention_seconds))


def _duration(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("optimize", "vacuum"))
    parser.add_argument("--lake", help="lake root (default: $DEDUPE_LAKE_DIR or ./lake)")
    parser.add_argument("--dry-run", action="store_true", help="vacuum: list, delete nothing")
    args = parser.parse_args(argv)
    prefix = f"lake-{args.action}:"
    try:
        settings = SparkSettings.from_env()
        if args.lake:
            settings = replace(settings, lake_dir=args.lake)
    except SparkSettingsError as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return 2
    if settings.lake_format != DELTA:
        print(f"{prefix} only Delta tables (DEDUPE_LAKE_FORMAT=delta) have upkeep", file=sys.stderr)
        return 2
    try:
        spark = build_session(settings, f"dedupe-lake-{args.action}")
    except (JarsMissingError, SparkVersionError) as exc:
        print(f"{prefix} {exc}", file=sys.stderr)
        return 2
    found = 0
    try:
        for path, zorder in (
            (settings.events_path, settings.zorder_columns),
            (settings.counts_path, []),
        ):
            if not delta_commits(spark, path):
                print(f"{prefix} no Delta table at {path} (has the job committed?)")
                continue
            found += 1
            if args.action == "optimize":
                print(f"{prefix} {optimize_table(spark, path, zorder).line()}", flush=True)
                continue
            result = vacuum_table(spark, path, settings.vacuum_retention, dry_run=args.dry_run)
            if isinstance(result, list):
                print(f"{prefix} {path}: would delete {len(result)} files")
                for file in result:
                    print(f"  {file}")
            else:
                print(f"{prefix} {result.line()}", flush=True)
    finally:
        spark.stop()
    return 0 if found else 2


if __name__ == "__main__":
    sys.exit(main())
