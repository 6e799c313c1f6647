"""The pure rules of the dedup strategies: which strategy decides a record, and the key it is
decided, placed and forwarded by. No I/O; table-driven tests in ``tests/unit/app/test_strategy.py``.

Strategies (``DEDUPE_STRATEGY``, or per source with ``DEDUPE_SOURCE_POLICIES``):

- ``message_id``: the event's ``messageId`` (``app/rules.py``). With ``DEDUPE_SCOPE=source`` the
  same id from two sources is two events. An event without a ``messageId`` goes to the
  dead-letter topic, or with ``DEDUPE_MISSING_ID=fingerprint`` is decided by a fingerprint of
  its canonical form (:func:`fingerprint`).
- ``producer_sequence``: headers ``dedupe.producer`` and ``dedupe.sequence``; at or below the
  producer's highest forwarded sequence a record is a repeat (``tables/producers.py``).
- ``off``: every copy is forwarded (still exactly once per input record).

A record with producer-sequence headers uses ``producer_sequence`` unless its source's policy
names another strategy.

Keys in ``seen_ids``: a message id's UTF-8 bytes as they are (global scope); ``0xFE``, the
source's length and name, then the id (source scope); ``0xFF`` and the fingerprint's 16 bytes.
Neither byte occurs in UTF-8, so no key of one kind equals a key of another.
"""

from __future__ import annotations

import enum
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

from app import rules
from tables.key_prefixes import RESERVED_TAG, SCOPED_TAG


class Strategy(enum.StrEnum):
    MESSAGE_ID = "message_id"
    PRODUCER_SEQUENCE = "producer_sequence"
    OFF = "off"


SOURCE_HEADER = "dedupe.source"
PRODUCER_HEADER = "dedupe.producer"
SEQUENCE_HEADER = "dedupe.sequence"
FINGERPRINT_HEADER = "dedupe.fingerprint"

#: Longest source and producer names, in UTF-8 bytes (a source name is stored in a length byte).
MAX_NAME_BYTES = 255
#: Sequences are non-negative and below 2**63 (Kafka's and Java's long): at most 19 digits.
MAX_SEQUENCE = 2**63 - 1

#: Bad-input reasons about the messageId alone (``app/rules.py``): a producer-sequence record
#: is decided by its headers, so it may have any of these and still be valid.
ID_ONLY_REASONS = frozenset(
    {
        rules.BadInput.NO_MESSAGE_ID,
        rules.BadInput.MESSAGE_ID_NOT_STRING,
        rules.BadInput.EMPTY_MESSAGE_ID,
        rules.BadInput.MESSAGE_ID_TOO_LONG,
    }
)

_SCOPED = SCOPED_TAG
_FINGERPRINT = RESERVED_TAG


@dataclass(frozen=True, slots=True)
class Meta:
    """The strategy headers of a record (raw bytes; None when absent)."""

    source: bytes | None = None
    producer: bytes | None = None
    sequence: bytes | None = None


NO_META = Meta()


def read_meta(headers: Sequence[tuple[str, bytes]]) -> Meta:
    """The strategy headers among ``headers`` (the last of each name wins, as in Kafka)."""
    if not headers:
        return NO_META
    source = producer = sequence = None
    for name, value in headers:
        if name == SOURCE_HEADER:
            source = value
        elif name == PRODUCER_HEADER:
            producer = value
        elif name == SEQUENCE_HEADER:
            sequence = value
    if source is None and producer is None and sequence is None:
        return NO_META
    return Meta(source, producer, sequence)


def choose(meta: Meta, policies: Mapping[bytes, Strategy], default: Strategy) -> Strategy:
    """The strategy that decides a record: its source's policy, else producer sequences when it
    carries either producer header, else the default."""
    if meta.source is not None:
        chosen = policies.get(meta.source)
        if chosen is not None:
            return chosen
    if meta.producer is not None or meta.sequence is not None:
        return Strategy.PRODUCER_SEQUENCE
    return default


@dataclass(frozen=True, slots=True)
class ProducerSequence:
    producer: bytes
    sequence: int


def producer_sequence(meta: Meta) -> ProducerSequence | str:
    """The record's producer and sequence, or why they are bad (the dead-letter detail)."""
    producer, sequence = meta.producer, meta.sequence
    if producer is None or not producer:
        return f"no {PRODUCER_HEADER} header" if producer is None else "empty producer name"
    if len(producer) > MAX_NAME_BYTES:
        return f"producer name is {len(producer)} bytes, limit {MAX_NAME_BYTES}"
    try:
        producer.decode("utf-8")
    except UnicodeDecodeError:
        return "producer name is not UTF-8"
    if sequence is None:
        return f"no {SEQUENCE_HEADER} header"
    if not sequence or len(sequence) > 19 or not sequence.isdigit():
        shown = sequence[:40].decode("ascii", "replace")
        return f"sequence {shown!r} is not 1-19 ASCII digits"
    number = int(sequence)
    if number > MAX_SEQUENCE:
        return f"sequence {number} is above 2^63-1"
    return ProducerSequence(producer, number)


def source_name(meta: Meta) -> str | None:
    """Why the source header is bad, or None when it is absent or fine."""
    source = meta.source
    if source is None:
        return None
    if not source or len(source) > MAX_NAME_BYTES:
        return f"source name must be 1-{MAX_NAME_BYTES} bytes"
    try:
        source.decode("utf-8")
    except UnicodeDecodeError:
        return "source name is not UTF-8"
    return None


def scoped_key(id_bytes: bytes, source: bytes | None) -> bytes:
    """The ``seen_ids`` key of a message id from ``source`` (source scope); the id itself when
    the record names no source."""
    if not source:
        return id_bytes
    return _SCOPED + bytes((len(source),)) + source + id_bytes


def fingerprint_key(fingerprint_hex: str) -> bytes:
    """The ``seen_ids`` key of a fingerprint."""
    return _FINGERPRINT + bytes.fromhex(fingerprint_hex)


def canonical(doc: Mapping[str, object], exclude: frozenset[str]) -> bytes:
    """The event without the ``exclude`` fields (top level), keys sorted at every level, no
    insignificant whitespace, as UTF-8. Integers beyond 64 bits (the standard library parses
    them; orjson does not write them) take ``json``'s form, which equals orjson's otherwise."""
    kept = {k: v for k, v in doc.items() if k not in exclude}
    try:
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        text = json.dumps(kept, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return text.encode("utf-8", "surrogatepass")


def fingerprint(doc: Mapping[str, object], exclude: frozenset[str]) -> str:
    """128-bit BLAKE2b of :func:`canonical`, as 32 lowercase hex digits."""
    return hashlib.blake2b(canonical(doc, exclude), digest_size=16).hexdigest()


#: Bytes of the content hash kept per id with ``DEDUPE_VERIFY_CONTENT`` (64 bits: a client
#: reusing ids goes unnoticed with probability 2^-64 per reuse).
CONTENT_HASH_BYTES = 8


def content_hash(doc: Mapping[str, object], exclude: frozenset[str]) -> bytes:
    """A short hash of :func:`canonical`, kept per id to tell a copy from a reused id."""
    return hashlib.blake2b(canonical(doc, exclude), digest_size=CONTENT_HASH_BYTES).digest()


def parse_policies(text: str) -> dict[bytes, Strategy]:
    """``web=message_id,billing=producer_sequence,legacy=off`` -> {source: strategy}.

    Raises ValueError naming every bad entry."""
    return {k: Strategy(v) for k, v in _by_source(text, tuple(Strategy)).items()}


#: ``DEDUPE_WINDOW_FROM`` choices (``tables.window.rearms``).
WINDOW_FROM = ("first_seen", "last_seen")


def parse_window_from(text: str) -> dict[bytes, bool]:
    """``poller=last_seen,web=first_seen`` -> {source: whether a repeat re-arms its clock}.

    Raises ValueError naming every bad entry."""
    return {k: v == "last_seen" for k, v in _by_source(text, WINDOW_FROM).items()}


def _by_source(text: str, choices: tuple[str, ...]) -> dict[bytes, str]:
    """``source=choice`` entries, comma-separated; ValueError naming every bad one."""
    found: dict[bytes, str] = {}
    bad: list[str] = []
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        name, sep, value = entry.partition("=")
        name, value = name.strip(), value.strip()
        if not sep or not name or value not in choices:
            bad.append(entry)
        elif len(name.encode()) > MAX_NAME_BYTES:
            bad.append(f"{name[:20]}... (longer than {MAX_NAME_BYTES} bytes)")
        elif name.encode() in found:
            bad.append(f"{name} (twice)")
        else:
            found[name.encode()] = value
    if bad:
        raise ValueError(f"{', '.join(bad)}: use source=<{'|'.join(choices)}>, comma-separated")
    return found


def field_list(text: str) -> frozenset[str]:
    """``sentAt, receivedAt`` -> the field names, blanks dropped."""
    return frozenset(f.strip() for f in text.split(",") if f.strip())


def describe_policies(policies: Mapping[bytes, Strategy]) -> dict[str, str]:
    return {k.decode(): v.value for k, v in sorted(policies.items())}
