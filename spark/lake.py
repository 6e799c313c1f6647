"""The lake's tables and checkpoints on any Hadoop filesystem: reading, listing, consistency.

A table of the job is a directory written by Spark's file sink: Parquet files plus the sink's
log ``_spark_metadata``, which lists the files of every committed micro-batch. Read a table
with :func:`read_table` (``spark.read.parquet(<dir>)``, which goes through that log); listing the
directory would also pick up files of micro-batches that were interrupted and never committed.

The checkpoint and the table's sink log are one unit. :func:`check_consistent` refuses the
two states in which a restart would silently lose or repeat rows: a table with committed
batches whose checkpoint is gone (a new checkpoint restarts at batch 0, which the sink then
skips as "already committed"), and a checkpoint with committed batches whose table is gone (the
query resumes after them, and their rows are nowhere).
"""

from __future__ import annotations

from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession

SINK_LOG = "_spark_metadata"


class TableMissingError(LookupError):
    """The path holds no table written by the job (no committed micro-batch yet)."""


class LakeStateError(RuntimeError):
    """A table and its checkpoint disagree; starting the query would lose or repeat rows."""


def hadoop_fs(spark: SparkSession, path: str) -> tuple[Any, Any]:
    """Hadoop's FileSystem and Path for ``path`` (local, hdfs://, s3a://...), through py4j."""
    sc: Any = spark.sparkContext
    hadoop_path = sc._jvm.org.apache.hadoop.fs.Path(path)
    return hadoop_path.getFileSystem(sc._jsc.hadoopConfiguration()), hadoop_path


def log_entries(spark: SparkSession, path: str) -> int:
    """How many entries a metadata log directory holds (0 when it does not exist)."""
    fs, directory = hadoop_fs(spark, path)
    if not fs.exists(directory):
        return 0
    names = [status.getPath().getName() for status in fs.listStatus(directory)]
    return sum(1 for name in names if not name.startswith((".", "_")))


def has_sink_log(spark: SparkSession, table: str) -> bool:
    return log_entries(spark, f"{table}/{SINK_LOG}") > 0


def data_file_names(spark: SparkSession, table: str) -> set[str]:
    """Names of every data file below ``table``, committed or not (hidden and ``_`` files and
    folders, like ``_spark_metadata`` and ``.crc`` files, are not data)."""
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


def read_table(spark: SparkSession, table: str) -> DataFrame:
    """A table of the job, read through its sink log (committed micro-batches only)."""
    if not has_sink_log(spark, table):
        raise TableMissingError(f"no table at {table} (no {SINK_LOG}: has the job committed?)")
    try:
        return spark.read.parquet(table)
    except AnalysisException as exc:  # the log exists but lists no file yet
        raise TableMissingError(f"no committed data in {table}: {exc}") from None


def check_consistent(spark: SparkSession, table: str, checkpoint: str) -> None:
    """Raise :class:`LakeStateError` when ``table`` and ``checkpoint`` cannot belong together.

    The checkpoint logs a batch's offsets before it runs and its commit after the sink
    committed it, so: a sink log implies checkpoint offsets, and checkpoint commits imply a
    sink log. Every state a crash can leave satisfies both.
    """
    sink_batches = log_entries(spark, f"{table}/{SINK_LOG}")
    planned = log_entries(spark, f"{checkpoint}/offsets")
    committed = log_entries(spark, f"{checkpoint}/commits")
    if sink_batches and not planned:
        raise LakeStateError(
            f"{table} holds {sink_batches} committed batches but its checkpoint {checkpoint} "
            "is missing or empty: a new checkpoint would skip or repeat rows. Restore the "
            "checkpoint, or move the table away to rebuild it from the topic."
        )
    if committed and not sink_batches:
        raise LakeStateError(
            f"checkpoint {checkpoint} has {committed} committed batches but the table {table} "
            "is missing: their rows would never be written again. Restore the table, or move "
            "the checkpoint away to rebuild the table from the topic."
        )
