"""Audit the lake (a Spark batch job): rows, distinct messageIds and duplicates of the events table.

Run it against the lake of the running (or stopped) job, same environment as the job::

    python -m spark.audit                 # or `make audit`; reads $DEDUPE_LAKE_DIR (./lake)
    python -m spark.audit --lake /data/lake --json

You should see, after a few seconds of JVM start-up::

    events: rows=10000 distinct=10000 duplicates=0 dates=1 files=12 (delta version 14)
    event_counts: windows=150 events=9412

The exit status is 1 when any messageId appears more than once, 2 when there is no events table
(the job has not committed a batch yet) or a setting is invalid, 0 otherwise. A duplicate is
listed with its copies: with the worker exactly once, it is a late duplicate, an id that came
back after the worker's window (``DEDUPE_WINDOW``) had forgotten it (``DEDUPE_LAKE_WRITE=merge``
keeps those out of the table).

The tables are read the way every reader must read them, through their log: a Delta table at
its current version (``spark.read.format("delta")``), a Parquet table of the file sink through
``_spark_metadata``. Files on disk that the table does not list are reported, not read:
``+N files not in the table``; with Delta, files replaced by ``make lake-optimize`` (kept for
readers of older versions) and files of interrupted batches, both deleted by
``make lake-vacuum`` once older than ``DEDUPE_LAKE_VACUUM_RETENTION``.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from dataclasses import asdict, dataclass, field, replace

from delta.tables import DeltaTable
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark.jars import JarsMissingError
from spark.lake import TABLE_LOG, TableMissingError, data_file_names, delta_commits, read_table
from spark.session import SparkVersionError, build_session
from spark.settings import DELTA, SparkSettings, SparkSettingsError


@dataclass
class EventsAudit:
    path: str
    rows: int
    distinct: int
    duplicates: int
    dates: int
    committed_files: int
    uncommitted_files: int
    duplicate_examples: list[tuple[str, int]] = field(default_factory=list)
    lake_format: str = DELTA
    #: The Delta version read (None for a Parquet table).
    version: int | None = None

    def line(self) -> str:
        read = (
            f"delta version {self.version}"
            if self.lake_format == DELTA
            else f"read through {TABLE_LOG[self.lake_format]}"
        )
        text = (
            f"events: rows={self.rows} distinct={self.distinct} duplicates={self.duplicates} "
            f"dates={self.dates} files={self.committed_files} ({read})"
        )
        if self.uncommitted_files:
            if self.lake_format == DELTA:
                text += (
                    f" +{self.uncommitted_files} files not in the table (compacted away or of "
                    "interrupted batches; make lake-vacuum deletes them)"
                )
            else:
                text += f" +{self.uncommitted_files} uncommitted files of interrupted batches"
                text += ", ignored"
        return text


@dataclass
class CountsAudit:
    path: str
    windows: int
    events: int

    def line(self) -> str:
        return f"event_counts: windows={self.windows} events={self.events}"


def delta_version(spark: SparkSession, path: str) -> int:
    """The current version of the Delta table at ``path``."""
    row = DeltaTable.forPath(spark, path).history(1).select("version").first()
    assert row is not None
    return int(row["version"])


def audit_events(spark: SparkSession, path: str, lake_format: str = DELTA) -> EventsAudit:
    version = delta_version(spark, path) if lake_format == DELTA and _exists(spark, path) else None
    table = read_table(spark, path, lake_format)
    per_id = table.groupBy("messageId").count()
    totals = per_id.agg(
        F.coalesce(F.sum("count"), F.lit(0)).alias("rows"),
        F.count(F.lit(1)).alias("distinct"),
        F.coalesce(F.sum(F.col("count") - 1), F.lit(0)).alias("duplicates"),
    ).first()
    assert totals is not None
    committed = {posixpath.basename(f) for f in table.inputFiles()}
    report = EventsAudit(
        path=path,
        rows=int(totals["rows"]),
        distinct=int(totals["distinct"]),
        duplicates=int(totals["duplicates"]),
        dates=table.select("event_date").distinct().count(),
        committed_files=len(committed),
        uncommitted_files=len(data_file_names(spark, path) - committed),
        lake_format=lake_format,
        version=version,
    )
    if report.duplicates:
        worst = per_id.where(F.col("count") > 1).orderBy(F.desc("count")).limit(5).collect()
        report = replace(report, duplicate_examples=[(r["messageId"], r["count"]) for r in worst])
    return report


def _exists(spark: SparkSession, path: str) -> bool:
    return delta_commits(spark, path) > 0


def audit_counts(spark: SparkSession, path: str, lake_format: str = DELTA) -> CountsAudit | None:
    """The per-minute counts table, or None before its first window was written."""
    try:
        table = read_table(spark, path, lake_format)
    except TableMissingError:
        return None
    row = table.agg(F.count(F.lit(1)).alias("windows"), F.sum("count").alias("events")).first()
    assert row is not None
    return CountsAudit(path, int(row["windows"]), int(row["events"] or 0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lake", help="lake root (default: $DEDUPE_LAKE_DIR or ./lake)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead")
    args = parser.parse_args(argv)
    try:
        settings = SparkSettings.from_env()
        if args.lake:
            settings = replace(settings, lake_dir=args.lake)
        spark = build_session(settings, "dedupe-lake-audit")
    except (SparkSettingsError, JarsMissingError, SparkVersionError) as exc:
        print(f"audit: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            events = audit_events(spark, settings.events_path, settings.lake_format)
        except TableMissingError as exc:
            print(f"audit: {exc}", file=sys.stderr)
            return 2
        counts = audit_counts(spark, settings.counts_path, settings.lake_format)
    finally:
        spark.stop()
    if args.json:
        print(json.dumps({"events": asdict(events), "event_counts": counts and asdict(counts)}))
    else:
        print(events.line())
        for message_id, n in events.duplicate_examples:
            print(f"  duplicate: {message_id!r} x{n}")
        print(counts.line() if counts else "event_counts: no minute written yet")
    return 1 if events.duplicates else 0


if __name__ == "__main__":
    sys.exit(main())
