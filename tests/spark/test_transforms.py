"""The pure transforms on small DataFrames: Kafka rows -> events, events -> per-minute counts."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.testing import assertDataFrameEqual

from spark.transforms import (
    COUNT_COLUMNS,
    EVENT_COLUMNS,
    EVENT_FIELDS,
    count_per_minute,
    parse_events,
)

pytestmark = pytest.mark.spark

KAFKA_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
EVENTS_SCHEMA = (
    "messageId string, type string, event string, name string, userId string, "
    "anonymousId string, groupId string, previousId string, timestamp timestamp, "
    "sentAt timestamp, receivedAt timestamp, properties string, traits string, context string, "
    "value string, kafka_partition int, kafka_offset long, kafka_timestamp timestamp, "
    "event_time timestamp, event_date date"
)
COUNTS_SCHEMA = (
    "window_start timestamp, window_end timestamp, type string, event string, count long, "
    "event_date date"
)
KAFKA_TS = datetime(2026, 9, 20, 23, 59, 59, tzinfo=UTC)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, us: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, us, tzinfo=UTC)


def kafka_rows(spark: SparkSession, *values: tuple[str, bytes]) -> DataFrame:
    """Kafka source rows: (key, value) at offsets 0, 1, ... of partition 3."""
    rows = [
        (key.encode(), value, "events-clean", 3, offset, KAFKA_TS, 0)
        for offset, (key, value) in enumerate(values)
    ]
    return spark.createDataFrame(rows, KAFKA_SCHEMA)


def event_row(value: bytes, offset: int, **fields: Any) -> dict[str, Any]:
    """An expected events row: every Segment field NULL unless given."""
    row: dict[str, Any] = dict.fromkeys(EVENT_FIELDS)
    row.update(fields)
    row.update(
        value=value.decode(),
        kafka_partition=3,
        kafka_offset=offset,
        kafka_timestamp=KAFKA_TS,
    )
    return row


def test_parse_events_types_every_segment_field_and_keeps_the_raw_value(
    spark: SparkSession,
) -> None:
    track = json.dumps(
        {
            "messageId": "m-1",
            "type": "track",
            "event": "Order Completed",
            "userId": "u-1",
            "anonymousId": "a-1",
            "timestamp": "2026-09-21T12:34:56.789Z",
            "sentAt": "2026-09-21T12:34:57Z",
            "receivedAt": "2026-09-21T14:34:58.5+02:00",
            "properties": {"revenue": 12.5, "currency": "USD"},
            "context": {"ip": "203.0.113.7"},
            "extra": [1, 2],
        },
        separators=(",", ":"),
    ).encode()
    identify = json.dumps(
        {
            "messageId": "m-2",
            "type": "identify",
            "userId": 42,
            "traits": {"plan": "pro"},
            "timestamp": "2026-09-21T23:30:00-02:00",
        }
    ).encode()
    actual = parse_events(kafka_rows(spark, ("m-1", track), ("m-2", identify)))

    expected = spark.createDataFrame(
        [
            event_row(
                track,
                0,
                messageId="m-1",
                type="track",
                event="Order Completed",
                userId="u-1",
                anonymousId="a-1",
                timestamp=utc(2026, 9, 21, 12, 34, 56, 789000),
                sentAt=utc(2026, 9, 21, 12, 34, 57),
                receivedAt=utc(2026, 9, 21, 12, 34, 58, 500000),
                properties='{"revenue":12.5,"currency":"USD"}',
                context='{"ip":"203.0.113.7"}',
                event_time=utc(2026, 9, 21, 12, 34, 56, 789000),
                event_date=date(2026, 9, 21),
            ),
            event_row(
                identify,
                1,
                messageId="m-2",
                type="identify",
                userId="42",
                traits='{"plan":"pro"}',
                # 23:30 at -02:00 is 01:30 UTC the next day: the date is the UTC date
                timestamp=utc(2026, 9, 22, 1, 30),
                event_time=utc(2026, 9, 22, 1, 30),
                event_date=date(2026, 9, 22),
            ),
        ],
        EVENTS_SCHEMA,
    )
    assert tuple(actual.columns) == EVENT_COLUMNS
    assertDataFrameEqual(actual, expected)


@pytest.mark.parametrize(
    "timestamp",
    [None, "yesterday", "", "1790000000", "2026-13-45T99:00:00Z"],
    ids=["absent", "words", "empty", "epoch-number", "impossible-date"],
)
def test_event_time_falls_back_to_the_kafka_timestamp(
    spark: SparkSession, timestamp: str | None
) -> None:
    doc: dict[str, Any] = {"messageId": "m-3", "type": "page"}
    if timestamp is not None:
        doc["timestamp"] = timestamp
    value = json.dumps(doc).encode()
    actual = parse_events(kafka_rows(spark, ("m-3", value)))
    expected = spark.createDataFrame(
        [
            event_row(
                value,
                0,
                messageId="m-3",
                type="page",
                event_time=KAFKA_TS,
                event_date=date(2026, 9, 20),
            )
        ],
        EVENTS_SCHEMA,
    )
    assertDataFrameEqual(actual, expected)


def test_an_unreadable_value_keeps_its_id_from_the_key_and_its_bytes(spark: SparkSession) -> None:
    actual = parse_events(
        kafka_rows(spark, ("m-4", b"not json"), ("m-5", b'["an", "array"]'), ("m-6", b"{}"))
    )
    expected = spark.createDataFrame(
        [
            event_row(raw, offset, messageId=key, event_time=KAFKA_TS, event_date=date(2026, 9, 20))
            for offset, (key, raw) in enumerate(
                [("m-4", b"not json"), ("m-5", b'["an", "array"]'), ("m-6", b"{}")]
            )
        ],
        EVENTS_SCHEMA,
    )
    assertDataFrameEqual(actual, expected)


def events(spark: SparkSession, *rows: tuple[datetime, str, str | None]) -> DataFrame:
    return spark.createDataFrame(rows, "event_time timestamp, type string, event string")


def test_count_per_minute_counts_each_minute_type_and_event(spark: SparkSession) -> None:
    actual = count_per_minute(
        events(
            spark,
            (utc(2026, 9, 21, 23, 59, 1), "track", "Signed Up"),
            (utc(2026, 9, 21, 23, 59, 59, 999000), "track", "Signed Up"),
            (utc(2026, 9, 21, 23, 59, 30), "track", "Order Completed"),
            (utc(2026, 9, 21, 23, 59, 30), "identify", None),
            (utc(2026, 9, 22, 0, 0, 0), "track", "Signed Up"),
        ),
        "10 minutes",
    )
    minute = (utc(2026, 9, 21, 23, 59), utc(2026, 9, 22, 0, 0))
    next_minute = (utc(2026, 9, 22, 0, 0), utc(2026, 9, 22, 0, 1))
    expected = spark.createDataFrame(
        [
            (*minute, "track", "Signed Up", 2, date(2026, 9, 21)),
            (*minute, "track", "Order Completed", 1, date(2026, 9, 21)),
            (*minute, "identify", None, 1, date(2026, 9, 21)),
            (*next_minute, "track", "Signed Up", 1, date(2026, 9, 22)),
        ],
        COUNTS_SCHEMA,
    )
    assert tuple(actual.columns) == COUNT_COLUMNS
    assertDataFrameEqual(actual, expected)


def test_count_per_minute_streams_each_minute_once_after_the_watermark(
    spark: SparkSession, tmp_path: Path
) -> None:
    """On a stream (append mode, watermark 1 minute): a minute is written once the watermark
    passed its end, never before and never twice; an event older than the watermark whose minute
    was already written is not counted. Each arrival is its own micro-batch."""
    source = tmp_path / "source"
    schema = "event_time timestamp, type string, event string"
    events(spark, (utc(2026, 9, 21, 12, 0, 10), "track", "A")).write.parquet(str(source))
    query = (
        count_per_minute(spark.readStream.schema(schema).parquet(str(source)), "1 minute")
        .writeStream.format("memory")
        .queryName("counts_stream_test")
        .outputMode("append")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .start()
    )

    def arrive(*rows: tuple[datetime, str, str | None]) -> list[Row]:
        """Write rows as a new file, process them; returns every row written so far."""
        events(spark, *rows).coalesce(1).write.mode("append").parquet(str(source))
        query.processAllAvailable()
        return spark.table("counts_stream_test").orderBy("window_start", "event").collect()

    try:
        assert (
            arrive(
                (utc(2026, 9, 21, 12, 0, 50), "track", "A"),
                (utc(2026, 9, 21, 12, 0, 59), "track", "B"),
                (utc(2026, 9, 21, 12, 1, 30), "track", "A"),
            )
            == []
        )  # watermark 12:00:30: minute 12:00 may still change
        first = arrive((utc(2026, 9, 21, 12, 3, 0), "track", "A"))  # watermark -> 12:02:00
        assert [(r.window_start.minute, r.event, r["count"]) for r in first] == [
            (0, "A", 2),
            (0, "B", 1),
            (1, "A", 1),
        ]
        arrive((utc(2026, 9, 21, 12, 0, 20), "track", "A"))  # too late: 12:00 is written
        actual = arrive((utc(2026, 9, 21, 12, 5, 0), "track", "A"))  # watermark -> 12:04:00
    finally:
        query.stop()
    expected = spark.createDataFrame(
        [
            (utc(2026, 9, 21, 12, 0), utc(2026, 9, 21, 12, 1), "track", "A", 2, date(2026, 9, 21)),
            (utc(2026, 9, 21, 12, 0), utc(2026, 9, 21, 12, 1), "track", "B", 1, date(2026, 9, 21)),
            (utc(2026, 9, 21, 12, 1), utc(2026, 9, 21, 12, 2), "track", "A", 1, date(2026, 9, 21)),
            (utc(2026, 9, 21, 12, 3), utc(2026, 9, 21, 12, 4), "track", "A", 1, date(2026, 9, 21)),
        ],
        COUNTS_SCHEMA,
    )
    assertDataFrameEqual(spark.createDataFrame(actual, COUNTS_SCHEMA), expected)
