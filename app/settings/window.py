"""The window section of the worker's settings: how long an id is remembered, and by which clock.

A base class of :class:`app.settings.Settings`, which validates it with every other section
(``app/settings/checks.py`` checks the bucket against the window).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envsettings import EnvSettings, setting


@dataclass(frozen=True)
class WindowSettings(EnvSettings):
    """Window settings of the dedup worker (a section of :class:`app.settings.Settings`)."""

    SECTION: ClassVar[str] = "Window"

    window: float = setting(
        28 * 86400.0,
        "DEDUPE_WINDOW",
        "Dedup window W: a copy is a repeat when its id was first seen less than W before the "
        "copy's record time (W itself is outside). Units s, m, h, d.",
        within=(1.0, 3650 * 86400.0),
    )
    window_from: str = setting(
        "first_seen",
        "DEDUPE_WINDOW_FROM",
        "Where an id's window starts: 'first_seen' (the forwarded copy; a repeat never extends "
        "the id's life, right for client retries) or 'last_seen' (every repeat re-arms it, for "
        "ids that repeat while they are alive: polling sources, webhooks re-sent until "
        "acknowledged). Per source: DEDUPE_SOURCE_WINDOW_FROM.",
        one_of=("first_seen", "last_seen"),
    )
    source_window_from: str = setting(
        "",
        "DEDUPE_SOURCE_WINDOW_FROM",
        "DEDUPE_WINDOW_FROM per source (header dedupe.source, as DEDUPE_SOURCE_POLICIES), over "
        "the default: e.g. 'poller=last_seen,web=first_seen'.",
    )
    count_repeats: bool = setting(
        False,
        "DEDUPE_COUNT_REPEATS",
        "Count, per held id, the repeats dropped (repeats_dropped in GET /messages/{id}). Each "
        "counted repeat writes its id's entry again: a changelog record and a state write per "
        "repeat, inside the transaction. Off: a repeat writes nothing, and the lookup answers "
        "repeats_dropped null; the worker's metrics count repeats either way.",
    )
    bucket: float = setting(
        0.0,
        "DEDUPE_BUCKET",
        "Time bucket of age-out: the window's cutoff moves a bucket at a time, so ids leave at "
        "most one bucket after they could. "
        "Unset or 0: DEDUPE_WINDOW / 100, at most 1h (a 28-day window gets 1h, a 60s window "
        "600ms). Set explicitly, it must be 1ms..DEDUPE_WINDOW.",
    )
    allowed_lateness: float = setting(
        3600.0,
        "DEDUPE_ALLOWED_LATENESS",
        "Ids are kept this long past the window, so records up to this far behind the "
        "partition's newest first sighting are still judged against every id they should be.",
        within=(0.0, 365 * 86400.0),
    )
    max_ids_per_partition: int = setting(
        20_000_000,
        "DEDUPE_MAX_IDS_PER_PARTITION",
        "Size cap per partition: past it the oldest ids are evicted first and the effective "
        "window shrinks.",
        within=(1, 10**12),
    )
    min_window: float = setting(
        86400.0,
        "DEDUPE_MIN_WINDOW",
        "A warning is logged when the size cap makes a partition's effective window shorter "
        "(than this, or than DEDUPE_WINDOW when that is shorter), and before that, when the "
        "observed new-id rate will fill the cap sooner (window_forecast in /stats).",
        within=(0.0, 3650 * 86400.0),
    )
    eviction_batch: int = setting(
        64,
        "DEDUPE_EVICTION_BATCH",
        "Most ids aged out per processed record (bounds the work added to any one record).",
        within=(1, 100_000),
    )
    time_source: str = setting(
        "kafka",
        "DEDUPE_TIME_SOURCE",
        "Record time for the window: 'kafka' (the record's Kafka timestamp) or 'event' (the "
        "event's own ISO-8601 'timestamp', falling back to the Kafka one).",
        one_of=("kafka", "event"),
    )
    max_future_skew: float = setting(
        3600.0,
        "DEDUPE_MAX_FUTURE_SKEW",
        "With DEDUPE_TIME_SOURCE=event: event times later than the Kafka timestamp plus this "
        "are clamped to it.",
        within=(0.0, 365 * 86400.0),
    )
