"""The lake job: Spark Structured Streaming from the clean topic into Delta tables, exactly once.

Run it next to the worker (settings from the same environment; see docs/spark.md)::

    make spark-jars          # once: the Kafka connector and Delta jars from Maven Central
    python -m spark.job      # or `make spark`; Ctrl-C stops it (a restart continues exactly)

You should see, after about ten seconds of JVM start-up::

    spark-lake: Spark 4.0.0 on local[2] reading 'events-clean' at localhost:9092 (read_committed)
    spark-lake: events -> /.../lake/events (delta, append; checkpoint /.../lake/_checkpoints/events)
    spark-lake: event_counts -> /.../lake/event_counts (delta, 1-minute windows, watermark 600s)
    spark-lake: events batch 0: 10000 rows
    spark-lake: event_counts batch 0: 10000 events, watermark 1970-01-01T00:00:00.000Z

then one line per micro-batch that read something, and a line when a query has been busy with
one step (Spark's status message) for 30 s, 60 s, 120 s...: a job stuck starting, fetching
offsets or writing says on what. Two queries run in one session, each with its
own checkpoint:

- ``events``: :func:`spark.transforms.parse_events` -> the Delta table ``<lake>/events``,
  partitioned by ``event_date``. Exactly once: the Kafka offsets of each micro-batch are logged
  in the checkpoint before it runs; Delta's streaming sink writes the batch's files and commits
  them in one table version that records the query id and batch number. A job killed mid-batch
  re-runs that batch with the same offsets after a restart: a batch whose commit had landed is
  skipped by the sink (its number is in the log), and the files of an attempt that never
  committed are in no version, so no Delta reader (Spark, delta-rs...) sees them. With
  ``DEDUPE_LAKE_WRITE=merge`` each batch is a MERGE on messageId instead
  (:mod:`spark.merge`), which also keeps out ids the worker's window let through again.
- ``event_counts``: :func:`spark.transforms.count_per_minute` -> the Delta table
  ``<lake>/event_counts``: each minute written once, after the watermark passed it.

``DEDUPE_LAKE_FORMAT=parquet`` writes both with Spark's file sink instead (exactly once for
readers that go through its ``_spark_metadata`` log). Compaction and vacuum: :mod:`spark.upkeep`.

Kafka source: ``kafka.isolation.level=read_committed``, so aborted records and open transactions
are never read; the offsets a batch covers end at the last stable offset. Transactional topics
have offsets without a readable record (commit/abort markers, aborted records): Spark's
consumer skips such invisible offsets whatever ``failOnDataLoss`` says, so the default
``failOnDataLoss=true`` is kept: it fails the query only when records the job has not read yet
were deleted (retention ran ahead of the job), which would silently drop events otherwise.

Exit status: 0 after Ctrl-C/SIGTERM, 1 when a query fails, 2 on a configuration problem.
"""

from __future__ import annotations

import signal
import sys
import time
from dataclasses import dataclass
from types import FrameType
from typing import Any

from pyspark.errors import PySparkException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from pyspark.sql.streaming.readwriter import DataStreamWriter

from spark import metrics
from spark.access import check_access
from spark.jars import JarsMissingError
from spark.lake import LakeStateError, check_consistent
from spark.merge import MergeOnId
from spark.session import SparkVersionError, build_session
from spark.settings import MERGE, SparkSettings, SparkSettingsError
from spark.transforms import count_per_minute, parse_events

APP_NAME = "dedupe-lake"
PREFIX = "spark-lake:"


def read_clean_topic(spark: SparkSession, settings: SparkSettings) -> DataFrame:
    """The clean topic as a streaming DataFrame of Kafka rows, read_committed."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", settings.bootstrap_servers)
        .option("subscribe", settings.topic)
        .option("kafka.isolation.level", "read_committed")
        .option("startingOffsets", settings.starting_offsets)
        .option("failOnDataLoss", "true")
        .options(**settings.spark_kafka_options())
    )
    if settings.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(settings.max_offsets_per_trigger))
    return reader.load()


@dataclass(frozen=True)
class Trigger:
    """When micro-batches run: every ``DEDUPE_SPARK_TRIGGER_INTERVAL`` (the job), or once over
    everything available and then stop (``available_now``: the benchmark)."""

    available_now: bool = False
    processing_time: str = ""


def _stream_writer(
    rows: DataFrame, settings: SparkSettings, name: str, checkpoint: str, trigger: Trigger
) -> DataStreamWriter:
    writer = (
        rows.writeStream.queryName(name)
        .outputMode("append")
        .option("checkpointLocation", checkpoint)
    )
    if trigger.available_now:
        return writer.trigger(availableNow=True)
    return writer.trigger(processingTime=trigger.processing_time or settings.trigger)


def start_events_query(
    spark: SparkSession, settings: SparkSettings, trigger: Trigger | None = None
) -> StreamingQuery:
    """The events query (append, or MERGE on messageId), started; no consistency check."""
    events = _stream_writer(
        parse_events(read_clean_topic(spark, settings)),
        settings,
        "events",
        settings.events_checkpoint,
        trigger or Trigger(),
    )
    if settings.lake_write == MERGE:
        return events.foreachBatch(MergeOnId(settings.events_path)).start()
    events = events.format(settings.lake_format).partitionBy("event_date")
    return events.option("path", settings.events_path).start()


def start_counts_query(
    spark: SparkSession, settings: SparkSettings, trigger: Trigger | None = None
) -> StreamingQuery:
    """The per-minute counts query, started; no consistency check."""
    counts = _stream_writer(
        count_per_minute(parse_events(read_clean_topic(spark, settings)), settings.watermark_delay),
        settings,
        "event_counts",
        settings.counts_checkpoint,
        trigger or Trigger(),
    )
    counts = counts.format(settings.lake_format).partitionBy("event_date")
    return counts.option("path", settings.counts_path).start()


def start_queries(
    spark: SparkSession, settings: SparkSettings, trigger: Trigger | None = None
) -> list[StreamingQuery]:
    """Start the events and the per-minute counts queries; returns them running.

    Raises :class:`spark.lake.LakeStateError` (before starting anything) when a table and its
    checkpoint do not belong together, or a table is of the other format.
    """
    check_consistent(spark, settings.events_path, settings.events_checkpoint, settings.lake_format)
    check_consistent(spark, settings.counts_path, settings.counts_checkpoint, settings.lake_format)
    return [
        start_events_query(spark, settings, trigger),
        start_counts_query(spark, settings, trigger),
    ]


def jvm_pid(spark: SparkSession) -> int:
    """The process id of the session's JVM (the driver; local mode runs the executors in it)."""
    sc: Any = spark.sparkContext
    return int(sc._jvm.java.lang.ProcessHandle.current().pid())


class ProgressPrinter:
    """Prints one line per finished micro-batch that read any row."""

    def __init__(self) -> None:
        self.last_batch: dict[str, int] = {}

    def print_new(self, query: StreamingQuery) -> None:
        """Print the query's last progress if it is new (polled twice a second, so a batch
        that finished within the same half second as the next one is not printed)."""
        name = query.name or query.id
        progress = query.lastProgress
        if progress is None or progress.batchId <= self.last_batch.get(name, -1):
            return
        self.last_batch[name] = progress.batchId
        rows = progress.numInputRows
        if rows == 0:
            return
        if name == "event_counts":
            watermark = progress.eventTime.get("watermark", "-")
            line = f"{name} batch {progress.batchId}: {rows} events, watermark {watermark}"
        else:
            line = f"{name} batch {progress.batchId}: {rows} rows"
        print(f"{PREFIX} {line}", flush=True)


#: Spark's status messages of a query with nothing to do; every other message is a step under way.
IDLE_STATUSES = ("Waiting for data to arrive", "Waiting for next trigger")


class StallWatch:
    """Prints a query's status message once it has stayed on one step for ``first`` seconds,
    then each time that time doubles: Spark logs nothing while a batch's offsets are fetched or
    its files written, so without it a job stuck there looks the same as an idle one."""

    def __init__(self, first: float = 30.0, clock: Any = time.monotonic) -> None:
        self.first = first
        self.clock = clock
        self.step: dict[str, tuple[str, float, float]] = {}  # name -> (message, since, next)

    def observe(self, name: str, message: str) -> str | None:
        """The line to print for ``name`` now showing ``message``, if one is due."""
        now = self.clock()
        current = self.step.get(name)
        if current is None or current[0] != message:
            self.step[name] = (message, now, now + self.first)
            return None
        _, since, due = current
        if message in IDLE_STATUSES or now < due:
            return None
        self.step[name] = (message, since, since + 2 * (due - since))
        return f"{name}: {message!r} for {now - since:.0f} s"


@dataclass
class StopRequest:
    """Set by the signal handler, which does nothing else: a ``threading.Event`` set, or a
    print, from a handler can deadlock or fail if the signal lands while the main thread holds
    the same lock or stream."""

    signal: int = 0

    @property
    def requested(self) -> bool:
        return self.signal != 0


def run(spark: SparkSession, settings: SparkSettings, stop: StopRequest) -> int:
    """Run both queries until a stop is requested (0) or one of them fails (1)."""
    print(
        f"{PREFIX} Spark {spark.version} on {spark.sparkContext.master} reading "
        f"{settings.topic!r} at {settings.bootstrap_servers} (read_committed)"
    )
    try:
        metrics.serve(settings.metrics_host, settings.metrics_port)
    except OSError as exc:
        print(
            f"{PREFIX} cannot serve metrics on {settings.metrics_host}:{settings.metrics_port} "
            f"({exc}): set DEDUPE_SPARK_METRICS_PORT to a free port, or 0 for none",
            file=sys.stderr,
        )
        return 2
    if settings.metrics_port:
        print(f"{PREFIX} metrics on http://{settings.metrics_host}:{settings.metrics_port}/metrics")
    try:
        queries = start_queries(spark, settings)
    except LakeStateError as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    how = "MERGE on messageId" if settings.lake_write == MERGE else "append"
    print(
        f"{PREFIX} events -> {settings.events_path} ({settings.lake_format}, {how}; "
        f"checkpoint {settings.events_checkpoint})"
    )
    print(
        f"{PREFIX} event_counts -> {settings.counts_path} "
        f"({settings.lake_format}, 1-minute windows, watermark {settings.watermark:g}s)",
        flush=True,
    )
    printer = ProgressPrinter()
    stalls = StallWatch()
    progress_metrics = metrics.ProgressMetrics()
    # a query's name is a call into the JVM: asked once, not at every poll
    named = [(query.name or str(query.id), query) for query in queries]
    progress_metrics.expect([name for name, _ in named])
    metrics.watch_jvm(jvm_pid(spark))
    status = 0
    try:
        while not stop.requested:
            time.sleep(0.5)
            for name, query in named:
                printer.print_new(query)
                if line := stalls.observe(name, query.status["message"]):
                    print(f"{PREFIX} {line}", flush=True)
                progress = query.lastProgress
                if progress is not None:
                    progress_metrics.observe(name, progress)
                if not query.isActive:
                    error = query.exception()
                    print(f"{PREFIX} query {name} stopped: {error}", file=sys.stderr)
                    status = 1
            if status:
                break
        if stop.requested:
            print(f"{PREFIX} {signal.Signals(stop.signal).name}: stopping", flush=True)
    finally:
        for query in queries:
            try:
                query.stop()
            except PySparkException as exc:  # a failed query may raise again on stop
                print(f"{PREFIX} stopping {query.name}: {exc}", file=sys.stderr)
    if status == 0:
        print(f"{PREFIX} stopped; a restart continues from the checkpoints", flush=True)
    return status


def main(argv: list[str] | None = None) -> int:
    del argv  # every option comes from the environment (spark/settings.py)
    try:
        settings = SparkSettings.from_env()
    except SparkSettingsError as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    # before the JVM starts: a denied topic is named within seconds, not at the first batch
    if problem := check_access(settings):
        print(f"{PREFIX} {problem}", file=sys.stderr)
        return 2
    try:
        spark = build_session(settings, APP_NAME)
    except (JarsMissingError, SparkVersionError) as exc:
        print(f"{PREFIX} {exc}", file=sys.stderr)
        return 2
    stop = StopRequest()

    def request_stop(signum: int, frame: FrameType | None) -> None:
        del frame
        stop.signal = signum

    # After the session: SparkContext installs a SIGINT handler that calls into the JVM from
    # the signal handler and raises KeyboardInterrupt in the middle of a py4j call. Here a
    # signal only sets the flag; the main loop stops the queries.
    signal.signal(signal.SIGINT, request_stop)
    signal.signal(signal.SIGTERM, request_stop)
    try:
        return run(spark, settings, stop)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())
