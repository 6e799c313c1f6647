"""The strategies section of the worker's settings: what makes two records one event.

A base class of :class:`app.settings.Settings`, which validates it with every other section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envsettings import EnvSettings, setting


@dataclass(frozen=True)
class StrategySettings(EnvSettings):
    """Strategies settings of the dedup worker (a section of :class:`app.settings.Settings`)."""

    SECTION: ClassVar[str] = "Strategies"

    strategy: str = setting(
        "message_id",
        "DEDUPE_STRATEGY",
        "How records are deduplicated when their source has no policy: 'message_id' (the "
        "event's messageId), 'producer_sequence' (headers dedupe.producer and dedupe.sequence) "
        "or 'off' (every copy forwarded). A record with producer headers uses "
        "producer_sequence unless its source's policy says otherwise (docs/strategies.md).",
        one_of=("message_id", "producer_sequence", "off"),
    )
    source_policies: str = setting(
        "",
        "DEDUPE_SOURCE_POLICIES",
        "Strategy per source (header dedupe.source, set by the ingest service from the write "
        "key), over DEDUPE_STRATEGY: e.g. 'web=message_id,billing=producer_sequence,legacy=off'.",
    )
    scope: str = setting(
        "global",
        "DEDUPE_SCOPE",
        "'global': a messageId is one event whatever its source; 'source': the same messageId "
        "from two sources is two events.",
        one_of=("global", "source"),
    )
    missing_id: str = setting(
        "dead_letter",
        "DEDUPE_MISSING_ID",
        "A JSON object without a messageId: 'dead_letter', or 'fingerprint': deduplicated by a "
        "128-bit hash of its canonical form (sorted keys, DEDUPE_FINGERPRINT_EXCLUDE removed), "
        "its output key and header dedupe.fingerprint.",
        one_of=("dead_letter", "fingerprint"),
    )
    fingerprint_exclude: str = setting(
        "sentAt,receivedAt,_metadata",
        "DEDUPE_FINGERPRINT_EXCLUDE",
        "Top-level fields left out of fingerprints and content hashes (they differ between "
        "retries of one event), comma-separated.",
    )
    verify_content: bool = setting(
        False,
        "DEDUPE_VERIFY_CONTENT",
        "Keep an 8-byte content hash per id; a copy inside the window whose content differs "
        "goes to the dead-letter topic (dedupe.error=messageId-reused) instead of being dropped.",
    )
    producer_idle: float = setting(
        6 * 3600.0,
        "DEDUPE_PRODUCER_IDLE",
        "A producer with no record for this long (record time) is forgotten.",
        within=(1.0, 3650 * 86400.0),
    )
    max_producers_per_partition: int = setting(
        10_000,
        "DEDUPE_MAX_PRODUCERS_PER_PARTITION",
        "Producers remembered per partition; past it the least recently active goes first.",
        within=(1, 10_000_000),
    )
