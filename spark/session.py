"""The SparkSession of the lake job, the audit and table upkeep: local defaults, local jars, Delta.

Started with ``python -m spark.job`` (or ``spark.audit``, ``spark.upkeep``), this process
launches Spark's JVM itself, so the session sets the master (``local[2]``), driver memory, the
connector and Delta jars from the cache (``spark.jars``, local files) and turns the UI off.
Under ``spark-submit`` the JVM already runs with the cluster's choices (``--master``, ``--jars``,
``--driver-memory``), and only the settings that belong to the job are applied: time zone,
shuffle partitions, and Delta Lake (its SQL extension and catalog, and
:data:`spark.jars.LOG_STORE_CLASS` as the log store of local ``file:`` tables, so the job and
``make lake-optimize`` can commit to one table from two JVMs).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from spark.jars import LOG_STORE_CLASS, cached_jars
from spark.settings import SparkSettings

#: The JVM's log configuration (warnings to stderr, routine streaming messages quieted).
LOG_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"


class SparkVersionError(RuntimeError):
    """The running Spark is not the release the jars were resolved for."""


def under_spark_submit() -> bool:
    """True when spark-submit started this Python process (it passes its gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


#: Delta Lake in a session: SQL (MERGE, OPTIMIZE, VACUUM) and ``delta.`<path>` `` tables.
DELTA_CONFIG = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    "spark.delta.logStore.file.impl": LOG_STORE_CLASS,
    # Tables any Delta reader can read: no deletion vectors (an insert-only MERGE writes none
    # anyway), so readers need only the base protocol (reader 1, writer 2).
    "spark.databricks.delta.properties.defaults.enableDeletionVectors": "false",
}


@contextlib.contextmanager
def jvm_working_dir() -> Iterator[None]:
    """Launch the JVM in a scratch directory of its own (under the temp dir), not in ours.

    Spark 4.0 makes its session's artifact directory relative to the JVM's working directory
    (ArtifactManager.artifactRootDirectory, ``Utils.createTempDir("artifacts")``) when the
    first streaming query starts. The image's WORKDIR is read-only to its user, so there every
    query failed with AccessDeniedException on ``artifacts``; anything else the JVM writes
    relative to its working directory lands in the scratch directory too. The Python process
    returns to its own directory once the JVM runs: relative paths of our settings keep
    meaning what they meant."""
    scratch = tempfile.mkdtemp(prefix="dedupe-spark-")
    atexit.register(shutil.rmtree, scratch, True)
    here = os.getcwd()
    os.chdir(scratch)
    try:
        yield
    finally:
        os.chdir(here)


def build_session(settings: SparkSettings, app_name: str) -> SparkSession:
    """A session for ``app_name`` with the Kafka connector and Delta Lake on its classpath.

    Raises :class:`spark.jars.JarsMissingError` when the jars are not resolved yet, and
    :class:`SparkVersionError` when the JVM's Spark differs from pyspark's.
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    )
    for key, value in DELTA_CONFIG.items():
        builder = builder.config(key, value)
    if not under_spark_submit():
        builder = (
            builder.master(settings.master)
            .config("spark.driver.memory", settings.driver_memory)
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config(
                "spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"
            )
        )
        jars = cached_jars(settings.jars_dir)
        builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
        if settings.master.startswith("local"):
            # Nothing of a local Spark needs to listen beyond this machine.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
            # Sized for a cluster by default: Delta rebuilds a table's state after each commit
            # in 50 partitions, and VACUUM lists files in up to 10,000 tasks; on a few local
            # cores that is seconds per micro-batch and most of a minute per VACUUM.
            small = str(settings.shuffle_partitions)
            builder = builder.config("spark.databricks.delta.snapshotPartitions", small)
            builder = builder.config(
                "spark.sql.sources.parallelPartitionDiscovery.parallelism", small
            )
    if under_spark_submit():
        spark = builder.getOrCreate()
    else:
        with jvm_working_dir():
            spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level.upper())
    if spark.version != pyspark.__version__:
        version = spark.version
        spark.stop()
        raise SparkVersionError(
            f"Spark {version} is running but pyspark is {pyspark.__version__}; the Kafka "
            "connector and Delta are pinned to pyspark's release (unset SPARK_HOME, or match "
            "the versions)"
        )
    return spark
