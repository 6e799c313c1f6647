"""Print the settings tables of docs/settings.md from ``app.settings.Settings`` (the source),
one per section of the settings object.

    python -m scripts.settings_table

``tests/unit/docs/test_readme.py`` fails when docs/settings.md does not contain exactly this table.
"""

from __future__ import annotations

from dataclasses import fields

from app.settings import Settings
from envsettings import EnvSettings
from envsettings.kafka_security import SECURITY_FIELDS


def _duration(seconds: float) -> str:
    return f"{seconds * 1000:g}ms" if seconds < 1 else f"{seconds:g}s"


def sections() -> list[tuple[str, list[str]]]:
    """(title, fields) of each section of the settings object, in field order: each base class
    with a ``SECTION`` title owns the fields it declares (the security section is left out: it
    has its own table)."""
    names = {f.name for f in fields(Settings)}
    out = []
    for cls in reversed(Settings.__mro__):
        if issubclass(cls, EnvSettings) and "SECTION" in vars(cls):
            own = [n for n in vars(cls).get("__annotations__", {}) if n in names]
            out.append((str(vars(cls)["SECTION"]), [n for n in own if n not in SECURITY_FIELDS]))
    return out


def table() -> str:
    """One markdown table per section (a heading, then variable, default, meaning)."""
    defaults = Settings()
    docs = {name: doc for name, _, doc in Settings.documented()}
    parts = []
    for title, names in sections():
        rows = [f"### {title}", "", "| variable | default | meaning |", "|---|---|---|"]
        for name in names:
            rows.append(
                f"| `{docs[name].env}` | {_shown(name, getattr(defaults, name))} | "
                f"{docs[name].help} |"
            )
        parts.append("\n".join(rows))
    return "\n\n".join(parts)


def _shown(name: str, value: object) -> str:
    if name == "repartition_topic":
        return "`<app id>-<input topic>-repartition`"
    if name == "bucket":
        return "`min(1h, window/100)`"
    if name == "data_dir":
        return "`./data`"
    if isinstance(value, float):
        return f"`{_duration(value)}`"
    return f"`{value}`" if value != "" else "(empty)"


if __name__ == "__main__":
    print(table())
