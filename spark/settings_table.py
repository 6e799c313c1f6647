"""Print the table of the Spark settings in docs/spark.md from ``spark.settings.SparkSettings``
(the source).

    python -m spark.settings_table

``tests/spark/test_settings_and_jars.py`` fails when docs/spark.md does not contain exactly this
table.
"""

from __future__ import annotations

from envsettings.kafka_security import SECURITY_FIELDS
from spark.settings import SparkSettings


def _shown_default(name: str, value: object) -> str:
    if name == "checkpoint_dir":
        return "`<lake>/_checkpoints`"
    if name == "jars_dir":
        return "`.cache/spark-jars` (in the repository)"
    if name == "optimize_zorder_by" and not value:
        return "(none)"
    if isinstance(value, float):
        if value >= 86400 and value % 86400 == 0:
            return f"`{value / 86400:g}d`"
        if value < 1:
            return f"`{value * 1000:g}ms`"
        return f"`{value / 60:g}m`" if value >= 60 and value % 60 == 0 else f"`{value:g}s`"
    return f"`{value}`"


def markdown_table() -> str:
    """The table of the Spark settings in docs/spark.md: variable, default, meaning."""
    defaults = SparkSettings()
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, _, doc in SparkSettings.documented():
        if name in SECURITY_FIELDS:  # in the shared table of docs/settings.md
            continue
        shown = _shown_default(name, getattr(defaults, name))
        rows.append(f"| `{doc.env}` | {shown} | {doc.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
