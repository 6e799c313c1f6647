"""Print the settings table of docs/settings.md from ``app.settings.Settings`` (the source).

    python -m scripts.settings_table

``tests/unit/test_readme.py`` fails when docs/settings.md does not contain exactly this table.
"""

from __future__ import annotations

from app.settings import Settings
from envsettings.kafka_security import SECURITY_FIELDS


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def table() -> str:
    """The markdown table: variable, default, meaning; one row per settings field."""
    defaults = Settings()
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, _, doc in Settings.documented():
        if name in SECURITY_FIELDS:  # shown once, in the table of envsettings.kafka_security
            continue
        value = getattr(defaults, name)
        if name == "repartition_topic":
            shown = "`<app id>-<input topic>-repartition`"
        elif name == "bucket":
            shown = "`min(1h, window/100)`"
        elif name == "data_dir":
            shown = "`./data`"
        elif isinstance(value, float):
            shown = f"`{_duration(value)}`"
        else:
            shown = f"`{value}`" if value != "" else "(empty)"
        rows.append(f"| `{doc.env}` | {shown} | {doc.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
