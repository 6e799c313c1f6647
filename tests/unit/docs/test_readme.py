"""The settings reference (docs/settings.md) is generated from the settings object and must stay
in sync; the README shows the two set-up commands and links the reference."""

from __future__ import annotations

from pathlib import Path

from app.settings import Settings
from envsettings.kafka_security import security_table
from scripts.settings_table import table

ROOT = Path(__file__).resolve().parents[3]
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


def _key_settings() -> dict[str, str]:
    """The README's "Key settings" table: variable -> default as shown (without backticks)."""
    section = README.read_text().split("## Key settings", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|")[1:3] for line in section.splitlines() if line.startswith("| `")]
    return {var.strip().strip("`"): default.strip().strip("`") for var, default in rows}


def test_the_key_settings_show_each_variables_real_default() -> None:
    """A default in the README parses (as the environment would give it) to the settings
    object's own default, so a copied table configures what the README says."""
    shown = _key_settings()
    fields = {doc.env: name for name, _, doc in Settings.documented()}
    defaults = Settings()
    for env, default in shown.items():
        assert env in fields, env
        parsed = Settings.from_env({env: default})
        assert getattr(parsed, fields[env]) == getattr(defaults, fields[env]), env


def test_the_key_settings_include_those_that_keep_a_cluster_safe() -> None:
    """Copied to a real cluster, the table must show how topics and state are replicated."""
    shown = _key_settings()
    for env in (
        "DEDUPE_REPLICATION_FACTOR",
        "DEDUPE_MIN_INSYNC_REPLICAS",
        "DEDUPE_STANDBY_REPLICAS",
    ):
        assert env in shown, env
