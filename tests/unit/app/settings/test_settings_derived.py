"""``app/settings/``: the derived repartition topic and bucket, the documentation of each field,
the wiring of the app, the advertised web URL."""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path
from typing import Any

import pytest

from app.settings import Settings, SettingsError
from envsettings.kafka_security import SECURITY_FIELDS
from tests.unit.app.settings.settings_support import FIELD_NAMES

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
    from app.worker.factory import create_app

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
    from app.worker.factory import create_app

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
