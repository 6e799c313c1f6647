"""The pure rules of de-duplication: validate an input record, route it, decide first sighting.

No I/O lives here; the agent (``app/agents.py``) reads, looks up, writes and sends, and asks these
functions what to do. Each rule has table-driven tests in ``tests/unit/test_rules.py``.

The contract for input records:

- the value is a UTF-8 JSON object with a non-empty string ``messageId`` of at most
  ``max_message_id_bytes`` UTF-8 bytes, and the whole value is at most ``max_event_bytes``;
- the key should be the messageId's UTF-8 bytes and the record should sit in the partition that
  Kafka's default (murmur2) partitioner gives that key. A record that does not (null key, another
  key, a custom partitioner) is re-keyed through the repartition topic, so every copy of an id is
  decided by the same partition's state;
- anything else is bad input and goes to the dead-letter topic with a reason.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass

from aiokafka.partitioner import murmur2


class BadInput(enum.StrEnum):
    """Why a record was dead-lettered (the value of the ``dedupe.error`` header)."""

    NULL_VALUE = "null_value"
    TOO_LARGE = "too_large"
    NOT_UTF8 = "not_utf8"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    NO_MESSAGE_ID = "no_message_id"
    MESSAGE_ID_NOT_STRING = "message_id_not_string"
    EMPTY_MESSAGE_ID = "empty_message_id"
    MESSAGE_ID_TOO_LONG = "message_id_too_long"


@dataclass(frozen=True, slots=True)
class Valid:
    """A well-formed event: its messageId as text and as the UTF-8 bytes used for keys."""

    message_id: str
    id_bytes: bytes


@dataclass(frozen=True, slots=True)
class Invalid:
    """A bad record: the reason (machine-readable) and a short human-readable detail."""

    reason: BadInput
    detail: str


def inspect(value: bytes | None, *, max_event_bytes: int, max_id_bytes: int) -> Valid | Invalid:
    """Validate one input value and extract its messageId."""
    if value is None:
        return Invalid(BadInput.NULL_VALUE, "record has no value (tombstone)")
    if len(value) > max_event_bytes:
        return Invalid(BadInput.TOO_LARGE, f"value is {len(value)} bytes, limit {max_event_bytes}")
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError as exc:
        return Invalid(BadInput.NOT_UTF8, f"invalid UTF-8 at byte {exc.start}")
    try:
        doc = json.loads(text)
    except ValueError as exc:  # also int() digit limits on huge numbers
        return Invalid(BadInput.NOT_JSON, f"not JSON: {exc}"[:200])
    except RecursionError:
        return Invalid(BadInput.NOT_JSON, "JSON nested too deeply to parse")
    if not isinstance(doc, dict):
        return Invalid(BadInput.NOT_OBJECT, f"JSON {type(doc).__name__}, not an object")
    if "messageId" not in doc:
        return Invalid(BadInput.NO_MESSAGE_ID, "no messageId field")
    message_id = doc["messageId"]
    if not isinstance(message_id, str):
        return Invalid(BadInput.MESSAGE_ID_NOT_STRING, f"messageId is {type(message_id).__name__}")
    if not message_id:
        return Invalid(BadInput.EMPTY_MESSAGE_ID, "messageId is empty")
    try:
        id_bytes = message_id.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from \\ud800-style escapes
        return Invalid(BadInput.NOT_UTF8, "messageId is not encodable as UTF-8")
    if len(id_bytes) > max_id_bytes:
        return Invalid(
            BadInput.MESSAGE_ID_TOO_LONG,
            f"messageId is {len(id_bytes)} bytes, limit {max_id_bytes}",
        )
    return Valid(message_id, id_bytes)


def partition_for(id_bytes: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2, Java-compatible) gives this key."""
    hashed: int = murmur2(id_bytes)
    return (hashed & 0x7FFFFFFF) % partitions


def needs_rekey(key: bytes | None, partition: int, event: Valid, partitions: int) -> bool:
    """True when the record is not keyed and placed by its messageId, so it must be re-keyed.

    Records are decided by the state of the partition their id hashes to; a copy that sits
    elsewhere would be checked against the wrong state and slip through.
    """
    return key != event.id_bytes or partition != partition_for(event.id_bytes, partitions)


# --- first sighting --------------------------------------------------------------------------
# A held id maps to its first-seen time: the Kafka timestamp (ms) of the first copy, as 8 bytes
# big-endian. A repeat never rewrites it (first-seen semantics).


def encode_first_seen(timestamp_ms: int) -> bytes:
    """The table value for an id first seen at ``timestamp_ms``."""
    return max(timestamp_ms, 0).to_bytes(8, "big")


def decode_first_seen(value: bytes) -> int:
    """The first-seen timestamp (ms) stored for an id."""
    return int.from_bytes(value, "big")


def is_duplicate(stored: bytes | None) -> bool:
    """A record is a repeat when its id is already held."""
    return stored is not None


# --- dead-letter headers ---------------------------------------------------------------------

ERROR_HEADER = "dedupe.error"
DETAIL_HEADER = "dedupe.error.detail"
SOURCE_TOPIC_HEADER = "dedupe.source.topic"
SOURCE_PARTITION_HEADER = "dedupe.source.partition"
SOURCE_OFFSET_HEADER = "dedupe.source.offset"


def dead_letter_headers(
    original: list[tuple[str, bytes]], bad: Invalid, topic: str, partition: int, offset: int
) -> list[tuple[str, bytes]]:
    """The original headers followed by the reason and the record's source coordinates."""
    return [
        *original,
        (ERROR_HEADER, bad.reason.value.encode()),
        (DETAIL_HEADER, bad.detail.encode("utf-8", "replace")),
        (SOURCE_TOPIC_HEADER, topic.encode()),
        (SOURCE_PARTITION_HEADER, str(partition).encode()),
        (SOURCE_OFFSET_HEADER, str(offset).encode()),
    ]
