"""Table-driven tests of ``app/settings.py``: defaults, environment variables, validation."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings, SettingsError, parse_duration
from envsettings.kafka_security import SECURITY_FIELDS

# The worker's own fields; the Kafka security section is tested in test_kafka_security.py.
FIELD_NAMES = [f.name for f in dataclasses.fields(Settings) if f.name not in SECURITY_FIELDS]
ENV_OF = {name: setting.env for name, _, setting in Settings.documented()}

# --- defaults --------------------------------------------------------------------------------

DEFAULTS: dict[str, Any] = {
    "bootstrap_servers": "localhost:9092",
    "app_id": "dedupe",
    "input_topic": "events",
    "output_topic": "events-clean",
    "dlq_topic": "events-dlq",
    "repartition_topic": "dedupe-events-repartition",
    "partitions": 8,
    "replication_factor": "auto",
    "min_insync_replicas": "auto",
    "data_dir": Path("./data"),
    "web_host": "127.0.0.1",
    "web_advertised_host": "",
    "web_token": "",
    "web_port": 6066,
    "commit_interval": 0.1,
    "commit_timeout": 30.0,
    "transaction_timeout": 15.0,
    "transaction_protocol": "auto",
    "compression": "none",
    "changelog_compression": "zstd",
    "fetch_max_wait": 0.1,
    "stall_timeout": 20.0,
    "max_event_bytes": 32 * 1024,
    "max_message_id_bytes": 256,
    "dlq_max_message_bytes": 8 * 1024 * 1024,
    "window": 28 * 86400.0,
    "window_from": "first_seen",
    "source_window_from": "",
    "bucket": 3600.0,
    "allowed_lateness": 3600.0,
    "max_ids_per_partition": 20_000_000,
    "min_window": 86400.0,
    "eviction_batch": 64,
    "time_source": "kafka",
    "max_future_skew": 3600.0,
    "rocksdb_write_buffer_bytes": 64 * 1024 * 1024,
    "rocksdb_memtable_budget_bytes": 256 * 1024 * 1024,
    "rocksdb_block_cache_bytes": 128 * 1024 * 1024,
    "rocksdb_compression": "zstd",
    "rocksdb_block_bytes": 16 * 1024,
    "strategy": "message_id",
    "source_policies": "",
    "scope": "global",
    "missing_id": "dead_letter",
    "fingerprint_exclude": "sentAt,receivedAt,_metadata",
    "verify_content": False,
    "producer_idle": 6 * 3600.0,
    "max_producers_per_partition": 10_000,
    "session_timeout": 10.0,
    "standby_replicas": 0,
    "bulk_restore": True,
    "snapshot_dir": "",
    "snapshot_interval": 3600.0,
    "snapshot_keep": 3,
    "log_level": "info",
}


def test_defaults_table_covers_every_field() -> None:
    assert sorted(DEFAULTS) == sorted(FIELD_NAMES)


@pytest.mark.parametrize(("name", "expected"), DEFAULTS.items(), ids=list(DEFAULTS))
def test_from_env_defaults(name: str, expected: Any) -> None:
    settings = Settings.from_env({})
    assert getattr(settings, name) == expected
    assert type(getattr(settings, name)) is type(expected)


def test_from_env_empty_mapping_ignores_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEDUPE_PARTITIONS", "3")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
    settings = Settings.from_env({})
    assert settings.partitions == 8
    assert settings.bootstrap_servers == "localhost:9092"


def test_from_env_without_mapping_reads_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DEDUPE_PARTITIONS", "3")
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "elsewhere:9092")
    settings = Settings.from_env()
    assert settings.partitions == 3
    assert settings.bootstrap_servers == "elsewhere:9092"


def test_state_dir() -> None:
    settings = Settings.from_env({"DEDUPE_DATA_DIR": "/srv/state", "DEDUPE_APP_ID": "dd"})
    assert settings.state_dir == Path("/srv/state/dd")


# --- every environment variable --------------------------------------------------------------

#: field -> (raw environment value, parsed value); every value differs from the default.
FROM_ENV: dict[str, tuple[str, Any]] = {
    "bootstrap_servers": ("b1:9092,b2:9093", "b1:9092,b2:9093"),
    "app_id": ("shop-dedupe", "shop-dedupe"),
    "input_topic": ("raw.events", "raw.events"),
    "output_topic": ("clean_events", "clean_events"),
    "dlq_topic": ("dead-events", "dead-events"),
    "repartition_topic": ("rekeyed", "rekeyed"),
    "partitions": ("12", 12),
    "replication_factor": ("3", "3"),
    "min_insync_replicas": ("2", "2"),
    "data_dir": ("/var/lib/dedupe", Path("/var/lib/dedupe")),
    "web_host": ("0.0.0.0", "0.0.0.0"),
    "web_advertised_host": ("10.1.2.3", "10.1.2.3"),
    "web_token": ("s3cret", "s3cret"),
    "web_port": ("8080", 8080),
    "commit_interval": ("250ms", 0.25),
    "commit_timeout": ("2m", 120.0),
    "transaction_timeout": ("45s", 45.0),
    "transaction_protocol": ("v1", "v1"),
    "compression": ("lz4", "lz4"),
    "changelog_compression": ("none", "none"),
    "fetch_max_wait": ("250ms", 0.25),
    "stall_timeout": ("1m", 60.0),
    "max_event_bytes": ("65536", 65536),
    "max_message_id_bytes": ("128", 128),
    "dlq_max_message_bytes": ("2097152", 2097152),
    "window": ("7d", 7 * 86400.0),
    "window_from": ("last_seen", "last_seen"),
    "source_window_from": ("poller=last_seen", "poller=last_seen"),
    "bucket": ("15m", 900.0),
    "allowed_lateness": ("0", 0.0),
    "max_ids_per_partition": ("1000", 1000),
    "min_window": ("12h", 43200.0),
    "eviction_batch": ("8", 8),
    "time_source": ("event", "event"),
    "max_future_skew": ("5m", 300.0),
    "rocksdb_write_buffer_bytes": ("262144", 262144),
    "rocksdb_memtable_budget_bytes": ("67108864", 67108864),
    "rocksdb_block_cache_bytes": ("33554432", 33554432),
    "rocksdb_compression": ("lz4", "lz4"),
    "rocksdb_block_bytes": ("4096", 4096),
    "strategy": ("producer_sequence", "producer_sequence"),
    "source_policies": ("web=message_id,legacy=off", "web=message_id,legacy=off"),
    "scope": ("source", "source"),
    "missing_id": ("fingerprint", "fingerprint"),
    "fingerprint_exclude": ("sentAt", "sentAt"),
    "verify_content": ("true", True),
    "producer_idle": ("2h", 7200.0),
    "max_producers_per_partition": ("500", 500),
    "session_timeout": ("20", 20.0),
    "standby_replicas": ("1", 1),
    "bulk_restore": ("false", False),
    "snapshot_dir": ("/backups/dedupe", "/backups/dedupe"),
    "snapshot_interval": ("30m", 1800.0),
    "snapshot_keep": ("7", 7),
    "log_level": ("debug", "debug"),
}


def test_from_env_table_covers_every_field() -> None:
    assert sorted(FROM_ENV) == sorted(FIELD_NAMES)
    for name, (_, parsed) in FROM_ENV.items():
        assert parsed != DEFAULTS[name], name


def test_from_env_reads_every_variable() -> None:
    environ = {ENV_OF[name]: raw for name, (raw, _) in FROM_ENV.items()}
    settings = Settings.from_env(environ)
    for name, (_, parsed) in FROM_ENV.items():
        assert getattr(settings, name) == parsed, name


@pytest.mark.parametrize("name", FIELD_NAMES)
def test_each_variable_sets_only_its_field(name: str) -> None:
    raw, parsed = FROM_ENV[name]
    settings = Settings.from_env({ENV_OF[name]: raw})
    assert getattr(settings, name) == parsed
    for other in FIELD_NAMES:
        if other in (name, "repartition_topic"):
            continue
        assert getattr(settings, other) == DEFAULTS[other], other


@pytest.mark.parametrize(
    ("environ", "name", "expected"),
    [
        pytest.param({"DEDUPE_PARTITIONS": ""}, "partitions", 8, id="empty-is-default"),
        pytest.param({"DEDUPE_PARTITIONS": " 12 "}, "partitions", 12, id="stripped-int"),
        pytest.param({"DEDUPE_COMMIT_INTERVAL": " 50ms "}, "commit_interval", 0.05, id="stripped"),
        pytest.param({"DEDUPE_LOG_LEVEL": "WARNING"}, "log_level", "WARNING", id="level-case"),
        pytest.param({"dedupe_partitions": "12"}, "partitions", 8, id="names-are-case-sensitive"),
    ],
)
def test_from_env_edge_values(environ: dict[str, str], name: str, expected: Any) -> None:
    assert getattr(Settings.from_env(environ), name) == expected


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
        # auto replication: the broker count decides, checked at start-up (app/topic_safety.py)
        pytest.param({"DEDUPE_MIN_INSYNC_REPLICAS": "5"}, "min_insync_replicas", "5", id="isr-5"),
    ],
)
def test_boundary_values_are_accepted(environ: dict[str, str], name: str, expected: Any) -> None:
    assert getattr(Settings.from_env(environ), name) == expected


# --- the derived repartition topic -----------------------------------------------------------


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, "dedupe-events-repartition"),
        ({"DEDUPE_APP_ID": "shop"}, "shop-events-repartition"),
        ({"DEDUPE_INPUT_TOPIC": "raw"}, "dedupe-raw-repartition"),
        ({"DEDUPE_APP_ID": "shop", "DEDUPE_INPUT_TOPIC": "raw"}, "shop-raw-repartition"),
        ({"DEDUPE_APP_ID": "shop", "DEDUPE_REPARTITION_TOPIC": "rekey"}, "rekey"),
        ({"DEDUPE_REPARTITION_TOPIC": ""}, "dedupe-events-repartition"),
    ],
)
def test_repartition_topic(environ: dict[str, str], expected: str) -> None:
    assert Settings.from_env(environ).repartition_topic == expected


def test_repartition_topic_derived_by_constructor() -> None:
    assert Settings(app_id="a", input_topic="in").repartition_topic == "a-in-repartition"


@pytest.mark.parametrize(
    ("environ", "other_env", "topic"),
    [
        pytest.param(
            {"DEDUPE_REPARTITION_TOPIC": "events-clean"},
            "DEDUPE_OUTPUT_TOPIC",
            "events-clean",
            id="explicit",
        ),
        pytest.param(
            {
                "DEDUPE_APP_ID": "x",
                "DEDUPE_INPUT_TOPIC": "y",
                "DEDUPE_OUTPUT_TOPIC": "x-y-repartition",
            },
            "DEDUPE_OUTPUT_TOPIC",
            "x-y-repartition",
            id="derived",
        ),
        pytest.param(
            {"DEDUPE_REPARTITION_TOPIC": "events-dlq"},
            "DEDUPE_DLQ_TOPIC",
            "events-dlq",
            id="explicit-dlq",
        ),
        pytest.param(
            {"DEDUPE_REPARTITION_TOPIC": "events"},
            "DEDUPE_INPUT_TOPIC",
            "events",
            id="explicit-input",
        ),
        pytest.param(
            {
                "DEDUPE_APP_ID": "x",
                "DEDUPE_INPUT_TOPIC": "y",
                "DEDUPE_DLQ_TOPIC": "x-y-repartition",
            },
            "DEDUPE_DLQ_TOPIC",
            "x-y-repartition",
            id="derived-dlq",
        ),
    ],
)
def test_repartition_topic_must_not_be_the_output_topic(
    environ: dict[str, str], other_env: str, topic: str
) -> None:
    """Re-keyed raw records (with duplicates) must never reach the clean, dead-letter or input
    topic; the message names both variables and the shared value."""
    with pytest.raises(SettingsError, match="topics must differ") as info:
        Settings.from_env(environ)
    assert f"DEDUPE_REPARTITION_TOPIC={topic!r}" in str(info.value)
    assert f"{other_env}={topic!r}" in str(info.value)


def test_derived_repartition_topic_is_a_valid_kafka_topic() -> None:
    """'<app id>-<input>-repartition' is derived before validation and validated like the
    other topics: with 200-char names it is 413 chars, so start-up refuses it."""
    derived = "a" * 200 + "-" + "b" * 200 + "-repartition"
    with pytest.raises(SettingsError) as info:
        Settings(app_id="a" * 200, input_topic="b" * 200)
    assert f"DEDUPE_REPARTITION_TOPIC={derived!r}: use 1-200 of [A-Za-z0-9._-]" in str(info.value)
    assert "DEDUPE_APP_ID" not in str(info.value)
    assert "DEDUPE_INPUT_TOPIC" not in str(info.value)


# --- documentation of the fields -------------------------------------------------------------


def test_documented_lists_every_field_in_order() -> None:
    documented = [name for name, _, _ in Settings.documented()]
    # The security section comes first (a base class), then the worker's own fields.
    assert documented == sorted(SECURITY_FIELDS, key=documented.index) + FIELD_NAMES


@pytest.mark.parametrize(
    ("name", "default", "setting"),
    Settings.documented(),
    ids=[name for name, _, _ in Settings.documented()],
)
def test_every_field_is_documented(name: str, default: str, setting: Any) -> None:
    assert setting.env
    assert setting.env.startswith(("KAFKA_", "DEDUPE_"))
    assert setting.env == setting.env.upper()
    assert setting.help.strip()
    assert Settings.describe(name) == setting
    assert isinstance(default, str)


def test_env_names_are_unique() -> None:
    envs = [setting.env for _, _, setting in Settings.documented()]
    assert len(envs) == len(set(envs))


def test_describe_unknown_field() -> None:
    with pytest.raises(KeyError):
        Settings.describe("no_such_field")


def test_settings_are_frozen() -> None:
    settings = Settings.from_env({})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.partitions = 3  # type: ignore[misc]


# --- wiring -----------------------------------------------------------------------------------


def test_the_app_runs_our_transport_and_transaction_manager(tmp_path: Path) -> None:
    from app.factory import create_app

    settings = Settings.from_env({"DEDUPE_DATA_DIR": str(tmp_path)})
    app = create_app(settings).app
    assert app.conf.processing_guarantee.value == "exactly_once"
    made = app._new_transport()
    assert type(made).__name__ == "Transport"
    assert made.TransactionManager.__name__ == "TaskTransactionManager"
    # Faust's own commit timer is a no-op under our manager: kept at 1 s or more.
    assert app.conf.broker_commit_interval == 1.0


async def test_the_worker_consumer_waits_at_most_the_fetch_max_wait(tmp_path: Path) -> None:
    """Faust creates its worker consumer with fetch_max_wait_ms=1500; ours takes the setting."""
    from app.factory import create_app

    settings = Settings.from_env(
        {
            "DEDUPE_DATA_DIR": str(tmp_path),
            "DEDUPE_FETCH_MAX_WAIT": "250ms",
        }
    )
    transport = create_app(settings).app._new_transport()
    consumer = transport.create_consumer(
        callback=lambda *args: None, on_partitions_revoked=None, on_partitions_assigned=None
    )
    kafka_consumer = consumer._thread._create_worker_consumer(transport)
    assert kafka_consumer._fetch_max_wait_ms == 250


# --- the age-out bucket, derived from the window -----------------------------------------------


@pytest.mark.parametrize(
    ("window", "bucket"),
    [
        pytest.param("28d", 3600.0, id="default-window-keeps-1h"),
        pytest.param("100h", 3600.0, id="100h-is-where-1h-starts"),
        pytest.param("10h", 360.0, id="10h"),
        pytest.param("1h", 36.0, id="1h"),
        pytest.param("60s", 0.6, id="60s"),
        pytest.param("1s", 0.01, id="shortest-window"),
    ],
)
def test_bucket_defaults_to_a_hundredth_of_the_window_at_most_1h(
    window: str, bucket: float
) -> None:
    """A user who sets only DEDUPE_WINDOW gets a working worker: the bucket follows the window,
    so ids outlive it by at most 1% (and never by more than an hour)."""
    settings = Settings.from_env({"DEDUPE_WINDOW": window})
    assert settings.bucket == pytest.approx(bucket)
    assert 0.001 <= settings.bucket <= settings.window


@pytest.mark.parametrize(
    ("environ", "bucket"),
    [
        pytest.param({"DEDUPE_WINDOW": "60s", "DEDUPE_BUCKET": "1s"}, 1.0, id="short-window"),
        pytest.param({"DEDUPE_WINDOW": "60s", "DEDUPE_BUCKET": "60s"}, 60.0, id="bucket=window"),
        pytest.param({"DEDUPE_BUCKET": "2h"}, 7200.0, id="default-window"),
        pytest.param({"DEDUPE_BUCKET": "1ms"}, 0.001, id="1ms"),
        pytest.param({"DEDUPE_WINDOW": "60s", "DEDUPE_BUCKET": "0"}, 0.6, id="0-is-derived"),
    ],
)
def test_an_explicit_bucket_is_kept(environ: dict[str, str], bucket: float) -> None:
    assert Settings.from_env(environ).bucket == pytest.approx(bucket)


@pytest.mark.parametrize(
    ("environ", "shown"),
    [
        pytest.param({"DEDUPE_WINDOW": "60s", "DEDUPE_BUCKET": "2m"}, "=120.0s", id="over-window"),
        pytest.param({"DEDUPE_BUCKET": "0.5ms"}, "=0.0005s", id="under-1ms"),
    ],
)
def test_an_explicit_bucket_outside_1ms_to_the_window_is_refused(
    environ: dict[str, str], shown: str
) -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env(environ)
    assert f"DEDUPE_BUCKET{shown}: must be 1ms..DEDUPE_WINDOW" in str(info.value)


def test_an_invalid_window_is_reported_without_a_derived_bucket_complaint() -> None:
    with pytest.raises(SettingsError) as info:
        Settings.from_env({"DEDUPE_WINDOW": "0"})
    assert "DEDUPE_WINDOW=0s: must be 1s..3650d" in str(info.value)
    assert "DEDUPE_BUCKET" not in str(info.value)


@pytest.mark.parametrize(
    ("environ", "url"),
    [
        pytest.param({}, "http://127.0.0.1:6066", id="the-bind-address"),
        pytest.param(
            {"DEDUPE_WEB_HOST": "0.0.0.0"}, f"http://{socket.gethostname()}:6066", id="all"
        ),
        pytest.param(
            {"DEDUPE_WEB_HOST": "0.0.0.0", "DEDUPE_WEB_ADVERTISED_HOST": "10.1.2.3"},
            "http://10.1.2.3:6066",
            id="advertised",
        ),
    ],
)
def test_the_url_other_workers_forward_lookups_to(environ: dict[str, str], url: str) -> None:
    """A worker bound to every interface must not tell the others to call 0.0.0.0 (they would
    call themselves)."""
    assert Settings.from_env(environ).web_url == url
