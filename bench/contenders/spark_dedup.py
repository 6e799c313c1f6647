"""Benchmark contender: the same de-duplication on Spark Structured Streaming (RocksDB state).

    python -m bench.contenders.spark_dedup --bootstrap B --input T --output T2 \\
        --partitions P --state-dir D --group G

One streaming query: Kafka source (``startingOffsets=earliest``,
``kafka.isolation.level=read_committed``) -> ``withWatermark("timestamp", "28 days")`` ->
``dropDuplicatesWithinWatermark(["messageId"])`` -> Kafka sink (key, value bytes and headers of
the first copy, unchanged). Spark runs in this process's JVM on ``local[2]``, built by
:func:`spark.session.build_session` with the Kafka connector jars from ``.cache/spark-jars/``
(``make spark-jars``). Runs in the foreground; SIGTERM or SIGINT stops the query and the session
and exits 0.

Choices, and what they mean for the comparison:

- **Not exactly-once end to end.** Spark's Kafka sink is at-least-once (it has no transactional
  sink): a micro-batch that fails, or a driver killed after the sink wrote a batch and before the
  checkpoint's commit log recorded it, is run again and its records are written again. So after
  failures the output can hold duplicates, even for ``read_committed`` readers. The source side
  and the state are exactly-once (offsets and state versions are in the checkpoint). Measured as
  is: on a clean run there are no duplicates.
- **Dedup key**: ``messageId`` is the record key (UTF-8), or, for a record without a key, the
  ``messageId`` field of its JSON value; the output key is the messageId bytes in both cases, so
  Kafka's default (murmur2) partitioner puts a key where the worker would. Deduplication is
  global: Spark shuffles by messageId into ``--partitions`` state partitions
  (``spark.sql.shuffle.partitions``), so null-keyed copies are caught too.
- **Window**: the watermark is on the Kafka record timestamp with a delay of 28 days, the
  worker's default ``DEDUPE_WINDOW``. ``dropDuplicatesWithinWatermark`` keeps an id until the
  watermark (newest record time seen minus 28 days) passes its first copy's time plus 28 days;
  a record older than the watermark is dropped as too late (never the case for a benchmark's
  fresh timestamps). Override with ``BENCH_SPARK_WATERMARK`` (a Spark interval string).
- **State**: ``RocksDBStateStoreProvider`` with changelog checkpointing (each micro-batch uploads
  a changelog of its state changes instead of a snapshot of the store; Spark's recommended
  setting for this provider). The checkpoint is ``<state-dir>/checkpoint``; Spark's local dirs
  (the RocksDB working copies, shuffle files) are ``<state-dir>/local``, so the state's disk
  footprint is all under ``--state-dir``.
- **Trigger**: processing time, 500 ms (``BENCH_SPARK_TRIGGER``, a Spark duration string): a
  micro-batch starts at most every half second, and as soon as the previous one ends when it
  ran longer. Output is visible when a micro-batch's sink writes finish, so latency is at least
  about half a trigger plus a micro-batch's duration. A micro-batch reads at most 100,000
  offsets (``BENCH_SPARK_MAX_OFFSETS``; 0 for no limit), so a pre-produced backlog is read in
  steps like a live stream.
- The output topic must exist (the harness creates it) or the broker must auto-create topics;
  Spark does not create topics.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import FrameType

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from spark.jars import JarsMissingError
from spark.session import SparkVersionError, build_session
from spark.settings import SparkSettings, SparkSettingsError

APP_NAME = "bench-spark-dedup"
PREFIX = "spark-dedup:"
ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

WATERMARK_ENV = "BENCH_SPARK_WATERMARK"
DEFAULT_WATERMARK = "28 days"
TRIGGER_ENV = "BENCH_SPARK_TRIGGER"
DEFAULT_TRIGGER = "500 milliseconds"
MAX_OFFSETS_ENV = "BENCH_SPARK_MAX_OFFSETS"
DEFAULT_MAX_OFFSETS = 100_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="input topic (key = messageId)")
    parser.add_argument("--output", required=True, help="output topic (first copies)")
    parser.add_argument(
        "--partitions", type=int, required=True, help="state (shuffle) partitions of the query"
    )
    parser.add_argument("--state-dir", required=True, help="checkpoint and Spark local dirs")
    parser.add_argument("--group", required=True, help="Kafka consumer group id prefix")
    return parser.parse_args(argv)


def deduplicated(
    spark: SparkSession, args: argparse.Namespace, watermark: str, max_offsets: int
) -> DataFrame:
    """The input topic's first copies per messageId, as Kafka sink rows (key, value, headers)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.input)
        .option("startingOffsets", "earliest")
        .option("kafka.isolation.level", "read_committed")
        .option("includeHeaders", "true")
        .option("groupIdPrefix", args.group)
    )
    if max_offsets > 0:
        reader = reader.option("maxOffsetsPerTrigger", str(max_offsets))
    message_id = F.coalesce(
        F.col("key").cast("string"),
        F.get_json_object(F.col("value").cast("string"), "$.messageId"),
    )
    return (
        reader.load()
        .withColumn("messageId", message_id)
        .withWatermark("timestamp", watermark)
        .dropDuplicatesWithinWatermark(["messageId"])
        .select(
            F.coalesce(F.col("key"), F.col("messageId").cast("binary")).alias("key"),
            "value",
            "headers",
        )
    )


def start_query(
    spark: SparkSession, args: argparse.Namespace, checkpoint: Path, trigger: str
) -> StreamingQuery:
    watermark = os.environ.get(WATERMARK_ENV, DEFAULT_WATERMARK)
    max_offsets = int(os.environ.get(MAX_OFFSETS_ENV, DEFAULT_MAX_OFFSETS))
    return (
        deduplicated(spark, args, watermark, max_offsets)
        .writeStream.queryName("dedup")
        .format("kafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.output)
        .option("kafka.acks", "all")
        .option("checkpointLocation", str(checkpoint))
        .outputMode("append")
        .trigger(processingTime=trigger)
        .start()
    )


@dataclass
class StopRequest:
    """Set by the signal handler only (see spark/job.py for why it does nothing else)."""

    signal: int = 0


def run(spark: SparkSession, args: argparse.Namespace, stop: StopRequest) -> int:
    checkpoint = Path(args.state_dir).resolve() / "checkpoint"
    trigger = os.environ.get(TRIGGER_ENV, DEFAULT_TRIGGER)
    query = start_query(spark, args, checkpoint, trigger)
    print(
        f"{PREFIX} Spark {spark.version} on {spark.sparkContext.master}: {args.input} -> "
        f"{args.output} at {args.bootstrap}, trigger {trigger}, checkpoint {checkpoint}",
        flush=True,
    )
    status = 0
    try:
        while not stop.signal:
            time.sleep(0.2)
            if not query.isActive:
                print(f"{PREFIX} query stopped: {query.exception()}", file=sys.stderr)
                status = 1
                break
        if stop.signal:
            print(f"{PREFIX} {signal.Signals(stop.signal).name}: stopping", flush=True)
    finally:
        try:
            query.stop()
        except PySparkException as exc:  # a failed query may raise again on stop
            print(f"{PREFIX} stopping the query: {exc}", file=sys.stderr)
    return status


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    state_dir = Path(args.state_dir).resolve()
    local_dir = state_dir / "local"
    local_dir.mkdir(parents=True, exist_ok=True)
    # Read by the JVM that pyspark launches (it overrides spark.local.dir): the RocksDB working
    # copies and shuffle files stay under --state-dir.
    os.environ["SPARK_LOCAL_DIRS"] = str(local_dir)
    try:
        settings = replace(
            SparkSettings.from_env(),
            bootstrap_servers=args.bootstrap,
            master="local[2]",
            shuffle_partitions=args.partitions,
        )
        spark = build_session(settings, APP_NAME)
    except (SparkSettingsError, JarsMissingError, SparkVersionError) as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    stop = StopRequest()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        del frame
        stop.signal = signum

    # After the session, which installs its own SIGINT handler (see spark/job.py).
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        return run(spark, args, stop)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
