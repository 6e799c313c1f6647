"""The pure rules of de-duplication: validate an input record, route it, decide first sighting.

No I/O lives here; the agent (``app/worker/agents.py``) reads, looks up, writes and sends, and
asks these functions what to do. Each rule has table-driven tests in
``tests/unit/app/test_rules_*.py``.

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
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

import numpy as np
import orjson


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
    #: Producer-sequence headers missing one half, or not a name and 1-19 digits.
    BAD_PRODUCER_SEQUENCE = "bad_producer_sequence"
    #: The ``dedupe.source`` header is empty, too long or not UTF-8 (with DEDUPE_SCOPE=source).
    BAD_SOURCE = "bad_source"
    #: DEDUPE_VERIFY_CONTENT: a copy inside the window whose content differs from the first's.
    MESSAGE_ID_REUSED = "messageId-reused"


@dataclass(frozen=True, slots=True)
class Valid:
    """A well-formed event: its messageId as text and as the UTF-8 bytes used for keys, and its
    own ``timestamp`` field as found (for DEDUPE_TIME_SOURCE=event)."""

    message_id: str
    id_bytes: bytes
    event_timestamp: object = None
    #: The parsed event (a dict), for fingerprints and content hashes; not part of the verdict.
    doc: object = field(default=None, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class Invalid:
    """A bad record: the reason (machine-readable) and a short human-readable detail."""

    reason: BadInput
    detail: str


def inspect(value: bytes | None, *, max_event_bytes: int, max_id_bytes: int) -> Valid | Invalid:
    """Validate one input value and extract its messageId.

    Values are parsed by orjson (faster than ``json``). Bad input is rare, so a
    value orjson refuses, or one it parses into something other than a valid event, is judged
    again by the standard library, whose verdict and detail stand. orjson is the stricter
    parser (it refuses NaN, Infinity, lone surrogates, numbers beyond a double's range and
    all that ``json`` refuses), and the fields judged (the document's type, ``messageId``,
    ``timestamp``) come out the same from both, so a value gets the verdict ``json`` alone
    would give it, with one exception: nesting 995 to 1,023 levels deep, which ``json``
    refuses or accepts depending on the caller's stack depth and orjson accepts every time
    (a verdict must not change on replay). ``tests/unit/app/test_rules_inspect.py`` holds the cases.
    """
    if value is None:
        return Invalid(BadInput.NULL_VALUE, "record has no value (tombstone)")
    if len(value) > max_event_bytes:
        return Invalid(BadInput.TOO_LARGE, f"value is {len(value)} bytes, limit {max_event_bytes}")
    try:
        checked = _valid(orjson.loads(value), max_id_bytes)
    except orjson.JSONDecodeError:
        return _inspect_stdlib(value, max_id_bytes)
    if isinstance(checked, Invalid):
        return _inspect_stdlib(value, max_id_bytes)
    return checked


def _inspect_stdlib(value: bytes, max_id_bytes: int) -> Valid | Invalid:
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
    return _valid(doc, max_id_bytes)


def _valid(doc: object, max_id_bytes: int) -> Valid | Invalid:
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
    return Valid(message_id, id_bytes, doc.get("timestamp"), doc)


_M = 0x5BD1E995
_MASK = 0xFFFFFFFF
_WORDS: dict[int, struct.Struct] = {}


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (Java-compatible), equal to ``aiokafka.partitioner.murmur2`` but about
    twice as fast: it runs for every input record, and aiokafka's version reads the key
    byte by byte and masks after every step."""
    length = len(data)
    words = length >> 2
    unpack = _WORDS.get(words)
    if unpack is None:
        unpack = _WORDS[words] = struct.Struct(f"<{words}I")
    h = 0x9747B28C ^ length
    for k in unpack.unpack_from(data):
        k = (k * _M) & _MASK
        k = ((k ^ (k >> 24)) * _M) & _MASK
        h = ((h * _M) & _MASK) ^ k
    tail = words << 2
    extra = length - tail
    if extra >= 3:
        h ^= data[tail + 2] << 16
    if extra >= 2:
        h ^= data[tail + 1] << 8
    if extra >= 1:
        h = ((h ^ data[tail]) * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


_M32 = np.uint32(_M)


def murmur2_many(keys: Sequence[bytes]) -> list[int]:
    """``[murmur2(k) for k in keys]``, computed for keys of one length at a time as arrays
    (uint32 arithmetic wraps as the Java int's does), for a fetched batch, where the placement
    of every record is checked (docs/benchmarks.md has the figures)."""
    out = [0] * len(keys)
    by_length: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        by_length.setdefault(len(key), []).append(i)
    for length, where in by_length.items():
        if len(where) < 8:  # arrays cost more than they save
            for i in where:
                out[i] = murmur2(keys[i])
            continue
        raw = np.frombuffer(b"".join([keys[i] for i in where]), dtype=np.uint8)
        raw = raw.reshape(len(where), length)
        h = np.full(len(where), 0x9747B28C ^ length, dtype=np.uint32)
        words = length >> 2
        if words:
            block = np.ascontiguousarray(raw[:, : words << 2]).view("<u4")
            for j in range(words):
                k = block[:, j] * _M32
                k ^= k >> np.uint32(24)
                k *= _M32
                h *= _M32
                h ^= k
        tail = words << 2
        extra = length - tail
        if extra >= 3:
            h ^= raw[:, tail + 2].astype(np.uint32) << np.uint32(16)
        if extra >= 2:
            h ^= raw[:, tail + 1].astype(np.uint32) << np.uint32(8)
        if extra >= 1:
            h ^= raw[:, tail].astype(np.uint32)
            h *= _M32
        h ^= h >> np.uint32(13)
        h *= _M32
        h ^= h >> np.uint32(15)
        for i, v in zip(where, h.tolist(), strict=True):
            out[i] = v
    return out


def partitions_for(keys: Sequence[bytes], partitions: int) -> list[int]:
    """``[partition_for(k, partitions) for k in keys]``, vectorised (:func:`murmur2_many`)."""
    return [(h & 0x7FFFFFFF) % partitions for h in murmur2_many(keys)]


def partition_for(id_bytes: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner (murmur2, Java-compatible) gives this key."""
    return (murmur2(id_bytes) & 0x7FFFFFFF) % partitions


def parse_object(value: bytes) -> dict[str, object] | None:
    """The value as a JSON object (orjson, then the standard library), or None."""
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError:
        try:
            doc = json.loads(value.decode("utf-8"))
        except (ValueError, RecursionError):
            return None
    return doc if isinstance(doc, dict) else None


def misplaced(
    key: bytes | None,
    partition: int,
    routing_key: bytes,
    partitions: int,
    key_partition: int | None = None,
) -> bool:
    """True when the record is not keyed by ``routing_key`` or not in the partition Kafka's
    default partitioner gives it: it must be re-keyed before it is decided. ``key_partition``
    is ``partition_for(key, partitions)`` when the caller has it already."""
    if key != routing_key:
        return True
    home = partition_for(routing_key, partitions) if key_partition is None else key_partition
    return partition != home


def clamp_ms(timestamp_ms: int) -> int:
    """Record times below zero (or absent, -1) count as 0."""
    return max(timestamp_ms, 0)


def event_time_ms(doc_timestamp: object, kafka_ms: int, max_future_ms: int) -> int:
    """The event's own ``timestamp`` (ISO 8601) in ms, at most ``max_future_ms`` after the Kafka
    timestamp; the Kafka timestamp when the field is missing or unparsable."""
    if not isinstance(doc_timestamp, str):
        return kafka_ms
    try:
        text = doc_timestamp.replace("Z", "+00:00")
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return kafka_ms
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    ms = int(parsed.timestamp() * 1000)
    return clamp_ms(min(ms, kafka_ms + max_future_ms))


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
