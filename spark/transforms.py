"""Pure transforms of the lake job: DataFrame in, DataFrame out, no I/O (unit-tested).

- :func:`parse_events`: Kafka rows of the clean topic -> one typed row per event, with the raw
  value, where it came from (partition, offset, Kafka timestamp) and its ``event_date``.
- :func:`count_per_minute`: events -> count per event-time minute, ``type`` and ``event``, with a
  watermark, so each minute is written once, when it can no longer change.

Both work on batch and streaming DataFrames alike. They use only built-in Spark SQL functions
(no Python UDFs), so on a cluster the executors need no Python code of ours. Time zones: the
job runs with ``spark.sql.session.timeZone=UTC``, so ``event_date`` is the UTC date.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StringType, StructField, StructType

#: The Segment event fields kept as columns. All are read as strings: an object (``properties``,
#: ``traits``, ``context``) becomes its JSON text, so no event is rejected for its shape; the
#: three timestamps are converted below. Anything else stays in the raw ``value`` column.
EVENT_FIELDS = (
    "messageId",
    "type",
    "event",
    "name",
    "userId",
    "anonymousId",
    "groupId",
    "previousId",
    "timestamp",
    "sentAt",
    "receivedAt",
    "properties",
    "traits",
    "context",
)
EVENT_JSON_SCHEMA = StructType([StructField(name, StringType(), True) for name in EVENT_FIELDS])
TIMESTAMP_FIELDS = ("timestamp", "sentAt", "receivedAt")

#: Columns of the events table, in order (``event_date`` is its partition column).
EVENT_COLUMNS = (
    *EVENT_FIELDS,
    "value",
    "kafka_partition",
    "kafka_offset",
    "kafka_timestamp",
    "event_time",
    "event_date",
)

#: Columns of the per-minute counts table, in order (``event_date`` is its partition column).
COUNT_COLUMNS = ("window_start", "window_end", "type", "event", "count", "event_date")


def _timestamp(text: Column) -> Column:
    """An ISO-8601 string (``2026-09-21T12:34:56.789Z``, with an offset, or a date) as a
    timestamp; NULL when absent or unparsable (never an error, whatever the ANSI mode)."""
    return text.try_cast("timestamp")


def parse_events(kafka: DataFrame) -> DataFrame:
    """Kafka rows (``key``, ``value``: binary; ``partition``, ``offset``, ``timestamp``) -> events.

    ``messageId`` falls back to the record key (the worker keys every record by its messageId),
    so a row always has its id even if its JSON were unreadable. ``event_time`` is the event's
    own ``timestamp``, or the Kafka timestamp when the event has none or it is unparsable;
    ``event_date`` is its date and partitions the table.
    """
    raw = F.col("value").cast("string")
    doc = F.from_json(raw, EVENT_JSON_SCHEMA)
    fields: list[Column] = []
    for name in EVENT_FIELDS:
        value = doc.getField(name)
        if name == "messageId":
            value = F.coalesce(value, F.col("key").cast("string"))
        elif name in TIMESTAMP_FIELDS:
            value = _timestamp(value)
        fields.append(value.alias(name))
    parsed = kafka.select(
        *fields,
        raw.alias("value"),
        F.col("partition").alias("kafka_partition"),
        F.col("offset").alias("kafka_offset"),
        F.col("timestamp").alias("kafka_timestamp"),
    )
    event_time = F.coalesce(F.col("timestamp"), F.col("kafka_timestamp"))
    return parsed.withColumn("event_time", event_time).withColumn(
        "event_date", F.to_date(F.col("event_time"))
    )


def count_per_minute(events: DataFrame, watermark_delay: str) -> DataFrame:
    """Events per event-time minute, ``type`` and ``event`` (NULL ``event`` for non-track calls).

    The watermark is the newest ``event_time`` seen minus ``watermark_delay`` (e.g.
    ``"10 minutes"``). In append mode a minute is emitted once the watermark passes its end, and
    events older than the watermark are no longer counted (they are still in the events table).
    On a batch DataFrame the watermark has no effect and every minute is counted.
    """
    window = F.window(F.col("event_time"), "1 minute")
    counted = (
        events.withWatermark("event_time", watermark_delay)
        .groupBy(window.alias("window"), F.col("type"), F.col("event"))
        .agg(F.count(F.lit(1)).alias("count"))
    )
    return counted.select(
        F.col("window.start").alias("window_start"),
        F.col("window.end").alias("window_end"),
        F.col("type"),
        F.col("event"),
        F.col("count"),
        F.to_date(F.col("window.start")).alias("event_date"),
    )
