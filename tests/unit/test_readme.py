"""The settings reference (docs/settings.md) is generated from the settings object and must stay
in sync; the README shows the two set-up commands and links the reference."""

from __future__ import annotations

from pathlib import Path

from envsettings.kafka_security import security_table
from scripts.settings_table import table

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
SETTINGS_DOC = ROOT / "docs" / "settings.md"


def test_the_settings_reference_lists_every_setting_as_the_settings_object_documents_it() -> None:
    assert table() in SETTINGS_DOC.read_text(), "run: python -m scripts.settings_table"
    assert "docs/settings.md" in README.read_text()


def test_the_settings_reference_lists_the_kafka_security_settings_once() -> None:
    text = SETTINGS_DOC.read_text()
    assert security_table() in text, "run: python -m envsettings.kafka_security"
    assert text.count("`KAFKA_SASL_PASSWORD`") == 1


def test_readme_shows_the_two_set_up_commands() -> None:
    text = README.read_text()
    assert "make run" in text and "make test" in text
