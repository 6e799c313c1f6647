"""DEDUPE_NATIVE_RECORDS: which decoder the worker installs for its source topics, and a
required native decoder that is missing stops the worker at start with the fix named."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import PartitionRecords

from adapters import fetched_records
from adapters.fetched_records import NativePartitionRecords
from app.settings import Settings, SettingsError
from app.worker.factory import decoding_line, use_native_records


@pytest.fixture(autouse=True)
def aiokafkas_loop_after() -> Iterator[None]:
    yield
    fetched_records.uninstall()


def test_auto_installs_the_native_decoder_for_the_source_topics() -> None:
    settings = Settings.from_env({"DEDUPE_INPUT_TOPIC": "in-a", "DEDUPE_REPARTITION_TOPIC": "re-a"})
    assert settings.native_records == "auto"
    assert use_native_records(settings) == "native"
    assert fetcher.PartitionRecords is NativePartitionRecords
    assert NativePartitionRecords.topics == {"in-a", "re-a"}


def test_off_keeps_aiokafkas_loop() -> None:
    fetched_records.install(fetched_records.load(), ["x"])  # type: ignore[arg-type]
    assert use_native_records(Settings.from_env({"DEDUPE_NATIVE_RECORDS": "off"})) == "aiokafka"
    assert fetcher.PartitionRecords is PartitionRecords


def test_auto_without_the_extension_runs_aiokafkas_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetched_records, "load", lambda: None)
    assert use_native_records(Settings.from_env({})) == "aiokafka"
    assert fetcher.PartitionRecords is PartitionRecords


def test_on_without_the_extension_stops_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetched_records, "load", lambda: None)
    with pytest.raises(SettingsError) as raised:
        Settings.from_env({"DEDUPE_NATIVE_RECORDS": "on"})
    assert "DEDUPE_NATIVE_RECORDS=on" in str(raised.value)
    assert "make install" in str(raised.value)


def test_on_with_the_extension_starts() -> None:
    assert use_native_records(Settings.from_env({"DEDUPE_NATIVE_RECORDS": "on"})) == "native"


def test_the_start_up_line_says_which_decoder_and_why() -> None:
    assert "decoded natively" in decoding_line("native", "auto", True)
    assert "messageIds found by its scan" in decoding_line("native", "auto", True)
    assert "every value parsed" in decoding_line("native", "auto", False)
    assert "zstd built natively" in decoding_line("native", "auto", False)
    assert "batches built by its builder" in decoding_line("aiokafka", "off", False)
    assert "make install builds it" in decoding_line("aiokafka", "auto", False)
    assert "DEDUPE_NATIVE_RECORDS=off" in decoding_line("aiokafka", "off", False)
