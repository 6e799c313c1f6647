"""The input of the contender benchmark (bench/throughput.py): the profiles, the records each
generates (deterministic for a seed), and how an output record is matched back to its event."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator, Sequence

from app import strategy
from scripts.streams import OutRecord, make_event

#: profile -> (kind of event, share of repeats). "id": events with a messageId, keyed by it;
#: "ps": producer sequences (64 producers, keyed by name, in order); "fp": no messageId, unkeyed
#: (the worker runs with DEDUPE_MISSING_ID=fingerprint and re-keys every record by its hash).
#: Only our worker (b, f) can run "ps" and "fp".
PROFILES = {
    "dup0.6": ("id", 0.006),
    "dup20": ("id", 0.20),
    "ps20": ("ps", 0.20),
    "fp20": ("fp", 0.20),
}
PRODUCERS = 64
PROFILE_KINDS = {
    "id": "events keyed by messageId",
    "ps": f"producer sequences from {PRODUCERS} producers",
    "fp": "events without a messageId, deduplicated by fingerprint",
}
FINGERPRINT_EXCLUDE = frozenset({"sentAt", "receivedAt", "_metadata"})
HEADERS = (("content-type", b"application/json"),)


def generate(
    events: int, dup_fraction: float, seed: int = 7, kind: str = "id"
) -> Iterator[OutRecord]:
    """Exactly ``events`` records, ``round(events * dup_fraction)`` of them repeats (see the
    module docstring), deterministic for ``seed``. A record's ``message_id`` is the event's
    identity: its messageId, its fingerprint (``fp``) or ``<producer>\\x00<sequence>`` (``ps``),
    as :func:`output_identity` reads it back from the output."""
    rng = random.Random(seed)
    repeats = round(events * dup_fraction)
    unique = events - repeats
    repeated = set(rng.sample(range(unique), repeats)) if repeats else set()
    late: dict[int, list[OutRecord]] = {}
    base_ms = 1_790_000_000_000  # event times in the JSON; fixed, so every run is byte-identical
    for i in range(unique):
        yield from late.pop(i, ())
        message_id, value = make_event(rng, i, base_ms)
        if kind == "id":
            record = OutRecord(message_id, message_id.encode(), value, HEADERS)
        elif kind == "fp":
            doc = json.loads(value)
            del doc["messageId"]
            fingerprint = strategy.fingerprint(doc, FINGERPRINT_EXCLUDE)
            record = OutRecord(fingerprint, None, json.dumps(doc).encode(), HEADERS)
        else:
            producer = f"producer-{i % PRODUCERS}"
            seq = str(i // PRODUCERS)
            headers = (
                *HEADERS,
                ("dedupe.producer", producer.encode()),
                ("dedupe.sequence", seq.encode()),
            )
            record = OutRecord(f"{producer}\x00{seq}", producer.encode(), value, headers)
        yield record
        if i in repeated:
            if rng.random() < 0.5:
                yield record
            else:
                late.setdefault(i + rng.randrange(1_000, 10_000), []).append(record)
    for at in sorted(late):
        yield from late[at]


def output_identity(key: bytes | None, headers: Sequence[tuple[str, bytes]]) -> bytes:
    """The event an output record is: its producer and sequence when it has them, else its key
    (messageId or fingerprint)."""
    if headers:
        found = dict(headers)
        producer = found.get("dedupe.producer")
        if producer is not None:
            return producer + b"\x00" + found.get("dedupe.sequence", b"")
    return key or b""
