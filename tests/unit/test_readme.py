"""The README's settings table is generated from the settings object and must stay in sync."""

from __future__ import annotations

from pathlib import Path

from scripts.settings_table import table

README = Path(__file__).resolve().parents[2] / "README.md"


def test_readme_lists_every_setting_as_the_settings_object_documents_it() -> None:
    assert table() in README.read_text(), "run: python -m scripts.settings_table"


def test_readme_shows_the_two_set_up_commands() -> None:
    text = README.read_text()
    assert "make run" in text and "make test" in text
