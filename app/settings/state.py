"""The state section of the worker's settings: standbys and scheduled snapshots.

A base class of :class:`app.settings.Settings`, which validates it with every other section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envsettings import EnvSettings, setting


@dataclass(frozen=True)
class StateSettings(EnvSettings):
    """How the worker rebuilds and keeps copies of its state (a section of
    :class:`app.settings.Settings`)."""

    SECTION: ClassVar[str] = "Standbys, restore and snapshots"

    standby_replicas: int = setting(
        0,
        "DEDUPE_STANDBY_REPLICAS",
        "Standby copies of each state partition on other workers, kept warm in bulk "
        "(recovery/follow.py): a takeover then restores only a copy's lag (in /stats).",
        within=(0, 8),
    )
    snapshot_dir: str = setting(
        "",
        "DEDUPE_SNAPSHOT_DIR",
        "Scheduled snapshots: every DEDUPE_SNAPSHOT_INTERVAL the worker writes a snapshot of "
        "its state (as `python -m app snapshot` does) into a new directory below this one and "
        "keeps the newest DEDUPE_SNAPSHOT_KEEP. Empty: none.",
    )
    snapshot_interval: float = setting(
        3600.0,
        "DEDUPE_SNAPSHOT_INTERVAL",
        "Time between scheduled snapshots (the first one this long after start-up).",
        within=(10.0, 7 * 86400.0),
    )
    snapshot_keep: int = setting(
        3,
        "DEDUPE_SNAPSHOT_KEEP",
        "How many scheduled snapshots to keep (the oldest are deleted after a new one).",
        within=(1, 1000),
    )
