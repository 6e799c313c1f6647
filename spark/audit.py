"""Audit the lake (a Spark batch job): rows, distinct messageIds and duplicates of the events table.

Run it against the lake of the running (or stopped) job, same environment as the job::

    python -m spark.audit                 # or `make audit`; reads $DEDUPE_LAKE_DIR (./lake)
    python -m spark.audit --lake /data/lake --json

You should see, after a few seconds of JVM start-up::

    events: rows=10000 distinct=10000 duplicates=0 dates=1 files=12 (read through _spark_metadata)
    event_counts: windows=150 events=9412

The exit status is 1 when any messageId appears more than once, 2 when there is no events table
(the job has not committed a batch yet) or a setting is invalid, 0 otherwise.

The tables are read the way every reader must read them: ``spark.read.parquet(<table dir>)``,
which goes through the file sink's log (``_spark_metadata``) and so sees exactly the files of
committed micro-batches. A job killed mid-batch leaves the files that attempt had written
behind; they are in no commit, are ignored, and are reported as ``uncommitted`` (``+N uncommitted
files of interrupted batches, ignored``). Tools that list the directory instead (a Hive table over
the folder, pandas on the files) would count them: point such tools at the committed files.
"""

from __future__ import annotations

import argparse
import json
import posixpath
import sys
from dataclasses import asdict, dataclass, field, replace

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from spark.jars import JarsMissingError
from spark.lake import SINK_LOG, TableMissingError, data_file_names, read_table
from spark.session import SparkVersionError, build_session
from spark.settings import SparkSettings, SparkSettingsError


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

    def line(self) -> str:
        text = (
            f"events: rows={self.rows} distinct={self.distinct} duplicates={self.duplicates} "
            f"dates={self.dates} files={self.committed_files} (read through {SINK_LOG})"
        )
        if self.uncommitted_files:
            text += f" +{self.uncommitted_files} uncommitted files of interrupted batches, ignored"
        return text


@dataclass
class CountsAudit:
    path: str
    windows: int
    events: int

    def line(self) -> str:
        return f"event_counts: windows={self.windows} events={self.events}"


def audit_events(spark: SparkSession, path: str) -> EventsAudit:
    table = read_table(spark, path)
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
    )
    if report.duplicates:
        worst = per_id.where(F.col("count") > 1).orderBy(F.desc("count")).limit(5).collect()
        report = replace(report, duplicate_examples=[(r["messageId"], r["count"]) for r in worst])
    return report


def audit_counts(spark: SparkSession, path: str) -> CountsAudit | None:
    """The per-minute counts table, or None before its first window was written."""
    try:
        table = read_table(spark, path)
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
        spark = build_session(settings, "dedupe-lake-audit", kafka=False)
    except (SparkSettingsError, JarsMissingError, SparkVersionError) as exc:
        print(f"audit: {exc}", file=sys.stderr)
        return 2
    try:
        try:
            events = audit_events(spark, settings.events_path)
        except TableMissingError as exc:
            print(f"audit: {exc}", file=sys.stderr)
            return 2
        counts = audit_counts(spark, settings.counts_path)
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
