"""``app/settings/``: durations, and validation with every problem reported at once."""

from __future__ import annotations

from typing import Any

import pytest

from app.settings import Settings, SettingsError, parse_duration

# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("250ms", 0.25),
        ("1ms", 0.001),
        ("30s", 30.0),
        ("15m", 900.0),
        ("24h", 86_400.0),
        ("28d", 28 * 86_400.0),
        ("2", 2.0),
        ("1.5s", 1.5),
        ("0.5m", 30.0),
        (" 10 s ", 10.0),
        ("0", 0.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "  ", "soon", "10 min", "-5s", "5x", "1e3", "s", "1.s", "ms"])
def test_parse_duration_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("env", "raw", "name", "seconds"),
    [
        ("DEDUPE_COMMIT_INTERVAL", "250ms", "commit_interval", 0.25),
        ("DEDUPE_COMMIT_INTERVAL", "2", "commit_interval", 2.0),
        ("DEDUPE_COMMIT_TIMEOUT", "5m", "commit_timeout", 300.0),
        ("DEDUPE_TRANSACTION_TIMEOUT", "15m", "transaction_timeout", 900.0),
        ("DEDUPE_SESSION_TIMEOUT", "30s", "session_timeout", 30.0),
    ],
)
def test_durations_from_env(env: str, raw: str, name: str, seconds: float) -> None:
    assert getattr(Settings.from_env({env: raw}), name) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("env", "raw"),
    [
        ("DEDUPE_COMMIT_INTERVAL", "soon"),
        ("DEDUPE_COMMIT_TIMEOUT", "30 seconds"),
        ("DEDUPE_TRANSACTION_TIMEOUT", "-1s"),
        ("DEDUPE_SESSION_TIMEOUT", "10sec"),
        ("DEDUPE_PARTITIONS", "eight"),
        ("DEDUPE_PARTITIONS", "8.5"),
        ("DEDUPE_WEB_PORT", "http"),
        ("DEDUPE_MAX_EVENT_BYTES", "32KB"),
    ],
)
def test_unparsable_values_name_the_variable(env: str, raw: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({env: raw})
    assert env in str(info.value)
    assert repr(raw) in str(info.value)


# --- validation ------------------------------------------------------------------------------

INVALID = [
    pytest.param({"DEDUPE_PARTITIONS": "0"}, "DEDUPE_PARTITIONS", id="partitions-0"),
    pytest.param({"DEDUPE_PARTITIONS": "10001"}, "DEDUPE_PARTITIONS", id="partitions-10001"),
    pytest.param({"DEDUPE_PARTITIONS": "-1"}, "DEDUPE_PARTITIONS", id="partitions-negative"),
    pytest.param({"DEDUPE_WEB_PORT": "70000"}, "DEDUPE_WEB_PORT", id="port-70000"),
    pytest.param({"DEDUPE_WEB_PORT": "0"}, "DEDUPE_WEB_PORT", id="port-0"),
    pytest.param({"DEDUPE_INPUT_TOPIC": "bad topic!"}, "DEDUPE_INPUT_TOPIC", id="bad-input"),
    pytest.param({"DEDUPE_OUTPUT_TOPIC": "a/b"}, "DEDUPE_OUTPUT_TOPIC", id="bad-output"),
    pytest.param({"DEDUPE_DLQ_TOPIC": "x" * 201}, "DEDUPE_DLQ_TOPIC", id="dlq-too-long"),
    pytest.param({"DEDUPE_APP_ID": "my app"}, "DEDUPE_APP_ID", id="bad-app-id"),
    pytest.param(
        {"DEDUPE_REPARTITION_TOPIC": "re partition"}, "DEDUPE_REPARTITION_TOPIC", id="bad-repart"
    ),
    pytest.param({"KAFKA_BOOTSTRAP_SERVERS": " "}, "KAFKA_BOOTSTRAP_SERVERS", id="no-brokers"),
    pytest.param({"DEDUPE_LOG_LEVEL": "loud"}, "DEDUPE_LOG_LEVEL", id="log-level-loud"),
    pytest.param({"DEDUPE_WINDOW_FROM": "last"}, "DEDUPE_WINDOW_FROM", id="window-from-last"),
    pytest.param(
        {"DEDUPE_SOURCE_WINDOW_FROM": "poller=latest"},
        "DEDUPE_SOURCE_WINDOW_FROM",
        id="source-window-from-latest",
    ),
    pytest.param({"DEDUPE_REPLICATION_FACTOR": "0"}, "DEDUPE_REPLICATION_FACTOR", id="rf-0"),
    pytest.param({"DEDUPE_REPLICATION_FACTOR": "33"}, "DEDUPE_REPLICATION_FACTOR", id="rf-33"),
    pytest.param({"DEDUPE_REPLICATION_FACTOR": "three"}, "DEDUPE_REPLICATION_FACTOR", id="rf-word"),
    pytest.param({"DEDUPE_MIN_INSYNC_REPLICAS": "0"}, "DEDUPE_MIN_INSYNC_REPLICAS", id="isr-0"),
    pytest.param({"DEDUPE_MIN_INSYNC_REPLICAS": "2.5"}, "DEDUPE_MIN_INSYNC_REPLICAS", id="isr-2.5"),
    pytest.param(
        {"DEDUPE_REPLICATION_FACTOR": "2", "DEDUPE_MIN_INSYNC_REPLICAS": "3"},
        "DEDUPE_MIN_INSYNC_REPLICAS=3 is more than DEDUPE_REPLICATION_FACTOR=2",
        id="isr-above-rf",
    ),
    pytest.param({"DEDUPE_COMMIT_INTERVAL": "0.5ms"}, "DEDUPE_COMMIT_INTERVAL", id="ci-0.5ms"),
    pytest.param({"DEDUPE_COMMIT_INTERVAL": "61s"}, "DEDUPE_COMMIT_INTERVAL", id="ci-61s"),
    pytest.param({"DEDUPE_COMMIT_TIMEOUT": "11m"}, "DEDUPE_COMMIT_TIMEOUT", id="ct-11m"),
    pytest.param({"DEDUPE_TRANSACTION_TIMEOUT": "16m"}, "DEDUPE_TRANSACTION_TIMEOUT", id="tt"),
    pytest.param({"DEDUPE_TRANSACTION_PROTOCOL": "v3"}, "DEDUPE_TRANSACTION_PROTOCOL", id="tp"),
    pytest.param({"DEDUPE_FETCH_MAX_WAIT": "0"}, "DEDUPE_FETCH_MAX_WAIT", id="fetch-wait-0"),
    pytest.param({"DEDUPE_FETCH_MAX_WAIT": "31s"}, "DEDUPE_FETCH_MAX_WAIT", id="fetch-wait-31s"),
    pytest.param({"DEDUPE_STALL_TIMEOUT": "500ms"}, "DEDUPE_STALL_TIMEOUT", id="stall-0.5s"),
    pytest.param({"DEDUPE_STALL_TIMEOUT": "2h"}, "DEDUPE_STALL_TIMEOUT", id="stall-2h"),
    pytest.param({"DEDUPE_MAX_EVENT_BYTES": "63"}, "DEDUPE_MAX_EVENT_BYTES", id="event-63"),
    pytest.param({"DEDUPE_MAX_MESSAGE_ID_BYTES": "0"}, "DEDUPE_MAX_MESSAGE_ID_BYTES", id="id-0"),
    pytest.param(
        {"DEDUPE_DLQ_MAX_MESSAGE_BYTES": "1000"}, "DEDUPE_DLQ_MAX_MESSAGE_BYTES", id="dlq-max"
    ),
    pytest.param({"DEDUPE_SESSION_TIMEOUT": "301"}, "DEDUPE_SESSION_TIMEOUT", id="session"),
    pytest.param({"DEDUPE_STANDBY_REPLICAS": "9"}, "DEDUPE_STANDBY_REPLICAS", id="standby-9"),
    pytest.param(
        {"DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES": "1000"},
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES",
        id="memtable-budget-1000",
    ),
    pytest.param(
        {"DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES": "0"}, "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES", id="cache-0"
    ),
    pytest.param({"DEDUPE_OUTPUT_TOPIC": "events"}, "DEDUPE_OUTPUT_TOPIC", id="output-is-input"),
    pytest.param({"DEDUPE_DLQ_TOPIC": "events-clean"}, "DEDUPE_DLQ_TOPIC", id="dlq-is-output"),
    pytest.param(
        {"DEDUPE_REPARTITION_TOPIC": "events-dlq"}, "DEDUPE_REPARTITION_TOPIC", id="repart-is-dlq"
    ),
    pytest.param(
        {"DEDUPE_INPUT_TOPIC": "t" * 200}, "DEDUPE_REPARTITION_TOPIC", id="derived-repart-too-long"
    ),
]


@pytest.mark.parametrize(("environ", "env"), INVALID)
def test_invalid_values_raise_naming_the_variable(environ: dict[str, str], env: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(environ)
    assert env in str(info.value)


@pytest.mark.parametrize(
    ("environ", "clashing"),
    [
        ({"DEDUPE_OUTPUT_TOPIC": "events"}, ["DEDUPE_INPUT_TOPIC", "DEDUPE_OUTPUT_TOPIC"]),
        ({"DEDUPE_DLQ_TOPIC": "events"}, ["DEDUPE_INPUT_TOPIC", "DEDUPE_DLQ_TOPIC"]),
        ({"DEDUPE_DLQ_TOPIC": "events-clean"}, ["DEDUPE_OUTPUT_TOPIC", "DEDUPE_DLQ_TOPIC"]),
    ],
)
def test_input_output_dlq_must_differ(environ: dict[str, str], clashing: list[str]) -> None:
    with pytest.raises(SettingsError, match="topics must differ") as info:
        Settings.from_env(environ)
    value = next(iter(environ.values()))
    for env in clashing:
        assert f"{env}={value!r}" in str(info.value), env


def test_all_problems_are_reported_together() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DEDUPE_PARTITIONS": "0", "DEDUPE_WEB_PORT": "70000"})
    assert "DEDUPE_PARTITIONS" in str(info.value)
    assert "DEDUPE_WEB_PORT" in str(info.value)


def test_unparsable_and_invalid_values_are_reported_together() -> None:
    """A value that does not parse does not hide the others' problems: one line each."""
    with pytest.raises(SettingsError) as info:
        Settings.from_env(
            {
                "DEDUPE_PARTITIONS": "eight",
                "DEDUPE_COMMIT_INTERVAL": "soon",
                "DEDUPE_WEB_PORT": "70000",
                "DEDUPE_TIME_SOURCE": "wall",
                "DEDUPE_OUTPUT_TOPIC": "events",
            }
        )
    lines = str(info.value).splitlines()
    assert lines[0] == "invalid settings:"
    assert sorted(line.strip().split("=")[0] for line in lines[1:]) == [
        "DEDUPE_COMMIT_INTERVAL",
        "DEDUPE_PARTITIONS",
        "DEDUPE_TIME_SOURCE",
        "DEDUPE_WEB_PORT",
        "input, output, dead-letter and repartition topics must differ: DEDUPE_INPUT_TOPIC",
    ]
    assert "  DEDUPE_TIME_SOURCE='wall': use one of kafka, event" in lines
    assert "  DEDUPE_WEB_PORT=70000: must be 1..65535" in lines


@pytest.mark.parametrize(
    ("env", "raw", "shown"),
    [
        pytest.param("DEDUPE_PARTITIONS", "0", "=0", id="partitions"),
        pytest.param("DEDUPE_WEB_PORT", "70000", "=70000", id="web-port"),
        pytest.param("DEDUPE_LOG_LEVEL", "loud", "'loud'", id="log-level"),
        pytest.param("DEDUPE_INPUT_TOPIC", "a b", "'a b'", id="topic"),
        pytest.param(
            "DEDUPE_COMMIT_INTERVAL", "61s", "=61s: must be 1ms..1m", id="commit-interval"
        ),
        pytest.param(
            "DEDUPE_TRANSACTION_TIMEOUT", "16m", "=16m: must be 1s..15m", id="transaction-timeout"
        ),
        pytest.param("DEDUPE_MAX_MESSAGE_ID_BYTES", "5000", "=5000", id="max-id-bytes"),
        pytest.param("DEDUPE_DLQ_MAX_MESSAGE_BYTES", "1000", "=1000", id="dlq-max"),
        pytest.param("DEDUPE_SESSION_TIMEOUT", "301", "=301", id="session"),
        pytest.param("DEDUPE_STANDBY_REPLICAS", "9", "=9", id="standby"),
        pytest.param("DEDUPE_REPLICATION_FACTOR", "0", "=0: must be auto or 1..32", id="rf"),
        pytest.param(
            "DEDUPE_MIN_INSYNC_REPLICAS", "two", "='two': use auto or a whole number", id="isr"
        ),
    ],
)
def test_invalid_values_are_shown(env: str, raw: str, shown: str) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({env: raw})
    assert f"{env}" in str(info.value)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    ("environ", "name", "expected"),
    [
        pytest.param({"DEDUPE_PARTITIONS": "1"}, "partitions", 1, id="partitions-1"),
        pytest.param({"DEDUPE_PARTITIONS": "10000"}, "partitions", 10_000, id="partitions-max"),
        pytest.param({"DEDUPE_WEB_PORT": "65535"}, "web_port", 65535, id="port-max"),
        pytest.param({"DEDUPE_COMMIT_INTERVAL": "1ms"}, "commit_interval", 0.001, id="ci-1ms"),
        pytest.param({"DEDUPE_COMMIT_INTERVAL": "60s"}, "commit_interval", 60.0, id="ci-60s"),
        pytest.param({"DEDUPE_TRANSACTION_TIMEOUT": "15m"}, "transaction_timeout", 900.0, id="tt"),
        pytest.param({"DEDUPE_MAX_EVENT_BYTES": "64"}, "max_event_bytes", 64, id="event-64"),
        # An explicit repartition topic: the derived one would be over 200 chars.
        pytest.param(
            {"DEDUPE_INPUT_TOPIC": "a" * 200, "DEDUPE_REPARTITION_TOPIC": "rekey"},
            "input_topic",
            "a" * 200,
            id="topic-200",
        ),
        pytest.param(
            {"DEDUPE_APP_ID": "d", "DEDUPE_INPUT_TOPIC": "e" * 186},
            "repartition_topic",
            "d-" + "e" * 186 + "-repartition",
            id="derived-repart-200",
        ),
        pytest.param({"DEDUPE_LOG_LEVEL": "Critical"}, "log_level", "Critical", id="level"),
        pytest.param({"DEDUPE_STANDBY_REPLICAS": "8"}, "standby_replicas", 8, id="standby-8"),
        pytest.param({"DEDUPE_REPLICATION_FACTOR": "1"}, "replication_factor", "1", id="rf-1"),
        pytest.param({"DEDUPE_REPLICATION_FACTOR": "32"}, "replication_factor", "32", id="rf-32"),
        pytest.param({"DEDUPE_REPLICATION_FACTOR": "AUTO"}, "replication_factor", "AUTO", id="rf"),
        pytest.param(
            {"DEDUPE_REPLICATION_FACTOR": "3", "DEDUPE_MIN_INSYNC_REPLICAS": "3"},
            "min_insync_replicas",
            "3",
            id="isr-equals-rf",
        ),
        # auto replication: the broker count decides, checked at start-up
        # (app/admin/topic_safety.py)
        pytest.param({"DEDUPE_MIN_INSYNC_REPLICAS": "5"}, "min_insync_replicas", "5", id="isr-5"),
    ],
)
def test_boundary_values_are_accepted(environ: dict[str, str], name: str, expected: Any) -> None:
    assert getattr(Settings.from_env(environ), name) == expected
