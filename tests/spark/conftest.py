"""Fixtures of the Spark tier: one in-process SparkSession, the connector jars, job processes.

The ``broker``, ``names`` and ``workers`` fixtures come from ``tests/conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from spark.jars import resolve
from spark.session import build_session
from spark.settings import SparkSettings
from tests.spark.harness import LakeJob


@pytest.fixture(scope="session")
def spark_jars() -> list[Path]:
    """The connector and Delta jars in the cache (resolved from Maven Central if `make
    spark-jars` has not run yet), as the job will load them."""
    return resolve(SparkSettings().jars_dir)


@pytest.fixture(scope="session")
def spark(spark_jars: list[Path]) -> Iterator[SparkSession]:
    """A small local session (2 cores, 2 shuffle partitions, UTC, no UI) built by the job's own
    :func:`spark.session.build_session`: Delta Lake and its log store, like the job's."""
    del spark_jars
    settings = SparkSettings(master="local[2]", shuffle_partitions=2, driver_memory="1g")
    session = build_session(settings, "dedupe-tests")
    yield session
    session.stop()


@pytest.fixture
def lake_jobs(spark_jars: list[Path]) -> Iterator[list[LakeJob]]:
    """A list to append lake jobs to; every one still running is killed after the test."""
    del spark_jars
    started: list[LakeJob] = []
    yield started
    for job in started:
        job.kill()
