"""Table-driven tests of ``app/settings/``: defaults and every environment variable (values
and validation: test_settings_values.py; derived settings, docs: test_settings_derived.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings
from tests.unit.app.settings.settings_support import ENV_OF, FIELD_NAMES

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
    "native_records": "auto",
    "stall_timeout": 20.0,
    "max_event_bytes": 32 * 1024,
    "max_message_id_bytes": 256,
    "dlq_max_message_bytes": 8 * 1024 * 1024,
    "window": 28 * 86400.0,
    "window_from": "first_seen",
    "count_repeats": False,
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
    "native_records": ("off", "off"),
    "stall_timeout": ("1m", 60.0),
    "max_event_bytes": ("65536", 65536),
    "max_message_id_bytes": ("128", 128),
    "dlq_max_message_bytes": ("2097152", 2097152),
    "window": ("7d", 7 * 86400.0),
    "window_from": ("last_seen", "last_seen"),
    "count_repeats": ("true", True),
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
