"""``ingest/settings.py``: defaults, environment variables, validation at start-up, and the
README's table of ingest settings (generated from the settings object)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from envsettings.kafka_security import SECURITY_FIELDS
from ingest.settings import IngestSettings, SettingsError, settings_table
from tests.support import ROOT

DEFAULTS: dict[str, Any] = {
    "host": "127.0.0.1",
    "port": 8080,
    "bootstrap_servers": "localhost:9092",
    "input_topic": "events",
    "write_keys": "",
    "metrics_token": "",
    "cors_origins": "*",
    "max_event_bytes": 32 * 1024,
    "max_message_id_bytes": 256,
    "max_batch_bytes": 500 * 1024,
    "max_batch_events": 2500,
    "ack_timeout": 10.0,
    "startup_timeout": 60.0,
    "ready_timeout": 1.0,
    "linger": 0.005,
    "log_level": "info",
    "crash_after_acks": 0,
}


def test_defaults_cover_every_field() -> None:
    # The Kafka security section: tests/unit/envsettings/test_kafka_security.py.
    own = [f.name for f in dataclasses.fields(IngestSettings) if f.name not in SECURITY_FIELDS]
    assert sorted(DEFAULTS) == sorted(own)
    settings = IngestSettings.from_env({})
    for name, expected in DEFAULTS.items():
        assert getattr(settings, name) == expected, name
    assert settings.write_key_list == frozenset()


def test_from_env_reads_every_variable() -> None:
    settings = IngestSettings.from_env(
        {
            "PORT": "9000",
            "DEDUPE_INGEST_HOST": "0.0.0.0",
            "KAFKA_BOOTSTRAP_SERVERS": "b1:9092,b2:9092",
            "DEDUPE_INPUT_TOPIC": "raw",
            "DEDUPE_WRITE_KEYS": " k1, k2 ,,",
            "DEDUPE_INGEST_ACK_TIMEOUT": "2500ms",
            "DEDUPE_INGEST_READY_TIMEOUT": "3s",
            "DEDUPE_INGEST_MAX_BATCH_BYTES": "100000",
            "DEDUPE_LOG_LEVEL": "DEBUG",
            "DEDUPE_INGEST_CORS_ORIGINS": "https://Shop.example, http://localhost:3000/",
        }
    )
    assert settings.cors_policy.origins == {"https://shop.example", "http://localhost:3000"}
    assert not settings.cors_policy.any_origin
    assert (settings.port, settings.host, settings.input_topic) == (9000, "0.0.0.0", "raw")
    assert settings.write_key_list == frozenset({"k1", "k2"})
    assert settings.ack_timeout == 2.5
    assert settings.ready_timeout == 3.0
    assert settings.max_batch_bytes == 100_000


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"PORT": "70000"}, "PORT=70000"),
        ({"PORT": "http"}, "PORT='http'"),
        ({"DEDUPE_INGEST_HOST": " "}, "DEDUPE_INGEST_HOST"),
        ({"KAFKA_BOOTSTRAP_SERVERS": ","}, "KAFKA_BOOTSTRAP_SERVERS"),
        ({"DEDUPE_INPUT_TOPIC": "bad topic"}, "DEDUPE_INPUT_TOPIC"),
        ({"DEDUPE_WRITE_KEYS": "web:a:b"}, "DEDUPE_WRITE_KEYS"),
        ({"DEDUPE_WRITE_KEYS": "web:a b"}, "DEDUPE_WRITE_KEYS"),
        ({"DEDUPE_WRITE_KEYS": "x" * 256 + ":k"}, "DEDUPE_WRITE_KEYS"),
        ({"DEDUPE_INGEST_CORS_ORIGINS": "shop.example"}, "DEDUPE_INGEST_CORS_ORIGINS"),
        ({"DEDUPE_INGEST_CORS_ORIGINS": "https://a.example/app"}, "'https://a.example/app'"),
        ({"DEDUPE_INGEST_CORS_ORIGINS": "*, https://a.example"}, "'*' already allows"),
        ({"DEDUPE_INGEST_CORS_ORIGINS": "none,https://a.example"}, "'none' allows no"),
        ({"DEDUPE_MAX_EVENT_BYTES": "10"}, "DEDUPE_MAX_EVENT_BYTES"),
        ({"DEDUPE_INGEST_MAX_BATCH_BYTES": "1000"}, "DEDUPE_INGEST_MAX_BATCH_BYTES"),
        ({"DEDUPE_INGEST_MAX_BATCH_EVENTS": "0"}, "DEDUPE_INGEST_MAX_BATCH_EVENTS"),
        ({"DEDUPE_INGEST_ACK_TIMEOUT": "1h"}, "DEDUPE_INGEST_ACK_TIMEOUT"),
        ({"DEDUPE_INGEST_ACK_TIMEOUT": "soon"}, "DEDUPE_INGEST_ACK_TIMEOUT"),
        ({"DEDUPE_INGEST_READY_TIMEOUT": "50ms"}, "DEDUPE_INGEST_READY_TIMEOUT"),
        ({"DEDUPE_INGEST_READY_TIMEOUT": "2m"}, "DEDUPE_INGEST_READY_TIMEOUT"),
        ({"DEDUPE_INGEST_LINGER": "5s"}, "DEDUPE_INGEST_LINGER"),
        ({"DEDUPE_LOG_LEVEL": "loud"}, "DEDUPE_LOG_LEVEL"),
        ({"DEDUPE_INGEST_CRASH_AFTER_ACKS": "-1"}, "DEDUPE_INGEST_CRASH_AFTER_ACKS"),
    ],
)
def test_invalid_values_name_the_variable(env: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError) as exc:
        IngestSettings.from_env(env)
    assert named in str(exc.value)


def test_an_invalid_setting_stops_the_service_with_status_2() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "ingest"],
        env={"PORT": "0", "PATH": "/usr/bin:/bin"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "PORT=0: must be 1..65535" in result.stderr


def test_the_settings_reference_lists_every_ingest_setting() -> None:
    assert "## HTTP ingest (Segment-compatible)" in (Path(ROOT) / "README.md").read_text()
    reference = (Path(ROOT) / "docs" / "settings.md").read_text()
    assert settings_table() in reference, "run: python -m ingest.settings"


def test_write_keys_may_name_their_source() -> None:
    settings = IngestSettings.from_env({"DEDUPE_WRITE_KEYS": "web:wk1, k2 ,billing:YWJj==,"})
    assert settings.write_key_sources == {"wk1": "web", "k2": None, "YWJj==": "billing"}
    assert settings.write_key_list == frozenset({"wk1", "k2", "YWJj=="})
