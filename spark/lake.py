"""The lake's tables and checkpoints on any Hadoop filesystem: reading, listing, consistency.

A table of the job is a directory of Parquet files plus a log that says which files are the
table, written atomically, one entry per commit:

- ``delta`` (the default, ``DEDUPE_LAKE_FORMAT``): Delta Lake's ``_delta_log/<version>.json``.
  Every Delta reader (Spark, delta-rs and so Python/pandas/DuckDB/Polars, Trino...) reads the
  table through it and sees exactly the committed files. Compaction (``make lake-optimize``)
  replaces small files by large ones in one commit; the files it replaced stay on disk for
  readers of older versions until ``make lake-vacuum`` deletes them.
- ``parquet``: Spark's file sink log ``_spark_metadata``, which only Spark's own reader honours.

Read a table with :func:`read_table`; listing the directory would also pick up files of
micro-batches that were interrupted and never committed (and, with Delta, files compacted away).

The checkpoint and the table's log are one unit. :func:`check_consistent` refuses the two states
in which a restart would silently lose or repeat rows: a table with commits whose checkpoint is
gone (a new checkpoint restarts at the first offsets, and Delta's sink would take them as a new
query's batches and append them again; the file sink would skip them as "already committed"),
and a checkpoint with committed batches whose table is gone (the query resumes after them, and
their rows are nowhere). It also refuses a table of the other format than the one configured.
"""

from __future__ import annotations

import re
from typing import Any

from py4j.protocol import Py4JJavaError
from pyspark.errors import AnalysisException
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame, SparkSession

from spark.settings import DELTA, PARQUET

SINK_LOG = "_spark_metadata"
DELTA_LOG = "_delta_log"
_DELTA_COMMIT = re.compile(r"^\d{20}\.json$")
#: The log each format keeps in its table directory.
TABLE_LOG = {DELTA: DELTA_LOG, PARQUET: SINK_LOG}


class TableMissingError(LookupError):
    """The path holds no table written by the job (no committed micro-batch yet)."""


class LakeStateError(RuntimeError):
    """A table and its checkpoint disagree; starting the query would lose or repeat rows."""


#: The base of Delta's optimistic-concurrency conflicts (ConcurrentAppendException,
#: ConcurrentDeleteReadException, MetadataChangedException...).
CONFLICT_BASE = "org.apache.spark.sql.delta.DeltaConcurrentModificationException"


def is_concurrent_conflict(exc: BaseException) -> bool:
    """True when a Delta transaction lost a race with a concurrent commit and may be run again.

    Delta's Python API (``DeltaTable.merge(...).execute()``, ``optimize()``) calls the JVM
    without PySpark's error conversion, so its conflicts arrive as a plain ``Py4JJavaError``;
    SQL and DataFrame writes arrive converted (``CapturedException``). Either way the Java
    exception (or one of its causes) is a :data:`CONFLICT_BASE`.
    """
    if isinstance(exc, Py4JJavaError):
        java: Any = exc.java_exception
    elif isinstance(exc, CapturedException):
        if (exc.getCondition() or "").startswith("DELTA_CONCURRENT"):
            return True
        java = getattr(exc, "_origin", None)
    else:
        return False
    while java is not None:
        cls = java.getClass()
        while cls is not None:
            if cls.getName() == CONFLICT_BASE:
                return True
            cls = cls.getSuperclass()
        java = java.getCause()
    return False


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem and Path for ``path`` (local, hdfs://, s3a://...), through py4j."""
    sc: Any = spark.sparkContext
    hadoop_path = sc._jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(sc._jsc.hadoopConfiguration()), hadoop_path


def _names(spark: SparkSession, path: str) -> list[str]:
    fs, directory = hadoop_fs(spark, path)
    if not fs.exists(directory):
        return []
    return [status.getPath().getName() for status in fs.listStatus(directory)]


def log_entries(spark: SparkSession, path: str) -> int:
    """How many entries a metadata log directory holds (0 when it does not exist)."""
    return sum(1 for name in _names(spark, path) if not name.startswith((".", "_")))


def delta_commits(spark: SparkSession, table: str) -> int:
    """How many commits (versions) a Delta table's log holds (0: no Delta table there)."""
    return sum(1 for name in _names(spark, f"{table}/{DELTA_LOG}") if _DELTA_COMMIT.match(name))


def table_commits(spark: SparkSession, table: str, lake_format: str) -> int:
    """Commits in the table's log of ``lake_format`` (0 when there is no such table)."""
    if lake_format == DELTA:
        return delta_commits(spark, table)
    return log_entries(spark, f"{table}/{SINK_LOG}")


def has_sink_log(spark: SparkSession, table: str) -> bool:
    return log_entries(spark, f"{table}/{SINK_LOG}") > 0


def data_file_names(spark: SparkSession, table: str) -> set[str]:
    """Names of every data file below ``table``, committed or not (hidden and ``_`` files and
    folders, like ``_delta_log``, ``_spark_metadata`` and ``.crc`` files, are not data)."""
    fs, root = hadoop_fs(spark, table)
    if not fs.exists(root):
        return set()
    prefix = root.toUri().getPath().rstrip("/")
    names: set[str] = set()
    files = fs.listFiles(root, True)
    while files.hasNext():
        file_path = files.next().getPath()
        relative = file_path.toUri().getPath()[len(prefix) :]
        parts = [p for p in relative.split("/") if p]
        if not any(p.startswith(("_", ".")) for p in parts):
            names.add(file_path.getName())
    return names


def read_table(spark: SparkSession, table: str, lake_format: str = DELTA) -> DataFrame:
    """A table of the job, read through its log (committed micro-batches only)."""
    if not table_commits(spark, table, lake_format):
        raise TableMissingError(
            f"no {lake_format} table at {table} (no {TABLE_LOG[lake_format]}: has the job "
            "committed?)"
        )
    try:
        if lake_format == DELTA:
            return spark.read.format("delta").load(table)
        return spark.read.parquet(table)
    except AnalysisException as exc:  # the log exists but lists no file yet
        raise TableMissingError(f"no committed data in {table}: {exc}") from None


def check_consistent(
    spark: SparkSession, table: str, checkpoint: str, lake_format: str = DELTA
) -> None:
    """Raise :class:`LakeStateError` when ``table`` and ``checkpoint`` cannot belong together.

    The checkpoint logs a batch's offsets before it runs and its commit after the sink
    committed it, so: table commits imply checkpoint offsets, and checkpoint commits imply a
    table. Every state a crash can leave satisfies both.
    """
    other = PARQUET if lake_format == DELTA else DELTA
    if table_commits(spark, table, other):
        raise LakeStateError(
            f"{table} is a {other} table ({TABLE_LOG[other]}) but DEDUPE_LAKE_FORMAT is "
            f"{lake_format}: set DEDUPE_LAKE_FORMAT={other}, or move the table and its "
            "checkpoint away to rebuild it from the topic."
        )
    table_batches = table_commits(spark, table, lake_format)
    planned = log_entries(spark, f"{checkpoint}/offsets")
    committed = log_entries(spark, f"{checkpoint}/commits")
    if table_batches and not planned:
        raise LakeStateError(
            f"{table} holds {table_batches} commits but its checkpoint {checkpoint} "
            "is missing or empty: a new checkpoint would skip or repeat rows. Restore the "
            "checkpoint, or move the table away to rebuild it from the topic."
        )
    if committed and not table_batches:
        raise LakeStateError(
            f"checkpoint {checkpoint} has {committed} committed batches but the table {table} "
            "is missing: their rows would never be written again. Restore the table, or move "
            "the checkpoint away to rebuild the table from the topic."
        )
