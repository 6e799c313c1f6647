"""The Spark benchmark contender (``python -m bench.contenders.spark_dedup``) on the real broker:
every messageId once in its output, with the first copy's key, value and headers, and a clean
exit on SIGTERM. Skipped when the connector jars are not in the cache (``make spark-jars``)."""

from __future__ import annotations

import pytest

from spark.jars import JarsMissingError, cached_jars
from spark.settings import SparkSettings
from tests.integration.test_bench_contenders import run_contender
from tests.support import Broker, Names

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def test_spark_contender_forwards_each_id_once(broker: Broker, names: Names) -> None:
    pytest.importorskip("pyspark")
    try:
        cached_jars(SparkSettings().jars_dir)
    except JarsMissingError as exc:
        pytest.skip(str(exc))
    # JVM start-up takes ~10 s of the budget on 2 cores.
    run_contender("spark_dedup", broker, names, timeout=180)
