"""The SparkSession of the lake job and the audit: light local defaults, local connector jars.

Started with ``python -m spark.job`` (or ``spark.audit``), this process launches Spark's JVM
itself, so the session sets the master (``local[2]``), driver memory, the connector jars from the
cache (``spark.jars``, local files) and turns the UI off. Under ``spark-submit`` the JVM already
runs with the cluster's choices (``--master``, ``--jars``, ``--driver-memory``), and only the
settings that belong to the job (time zone, shuffle partitions) are applied.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyspark
from pyspark.sql import SparkSession

from spark.jars import cached_jars
from spark.settings import SparkSettings

#: The JVM's log configuration (warnings to stderr, routine streaming messages quieted).
LOG_CONFIG = Path(__file__).resolve().parent / "log4j2.properties"


class SparkVersionError(RuntimeError):
    """The running Spark is not the release the connector jars were resolved for."""


def under_spark_submit() -> bool:
    """True when spark-submit started this Python process (it passes its gateway port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def build_session(settings: SparkSettings, app_name: str, *, kafka: bool) -> SparkSession:
    """A session for ``app_name``; with ``kafka`` the connector jars are on its classpath.

    Raises :class:`spark.jars.JarsMissingError` when the jars are not resolved yet, and
    :class:`SparkVersionError` when the JVM's Spark differs from pyspark's.
    """
    builder = (
        SparkSession.builder.appName(app_name)
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(settings.shuffle_partitions))
    )
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
        if kafka:
            jars = cached_jars(settings.jars_dir)
            builder = builder.config("spark.jars", ",".join(str(j) for j in jars))
        if settings.master.startswith("local"):
            # Nothing of a local Spark needs to listen beyond this machine.
            os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(settings.log_level.upper())
    if spark.version != pyspark.__version__:
        version = spark.version
        spark.stop()
        raise SparkVersionError(
            f"Spark {version} is running but pyspark is {pyspark.__version__}; the Kafka "
            "connector is pinned to pyspark's release (unset SPARK_HOME, or match the versions)"
        )
    return spark
