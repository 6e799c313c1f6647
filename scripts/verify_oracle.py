"""The verifier's oracle (scripts/verify.py): what a clean-topic record is, and what the clean
and dead-letter topics must hold, derived from the input topic with the worker's own rules.

A record of the clean topic is one event by its decision key (:func:`identity_of`): its key (the
messageId or fingerprint), within its source with ``DEDUPE_SCOPE=source``, and for producer
sequences the producer and sequence (their headers).
"""

from __future__ import annotations

from dataclasses import dataclass

from app import rules, strategy
from app.settings import Settings
from app.strategy import Strategy
from scripts.topic_reader import Record


def identity_of(record: Record, settings: Settings) -> bytes | None:
    """The event a clean-topic record is, by the worker's decision key (see the docstring)."""
    meta = strategy.read_meta(record.headers)
    policies = strategy.parse_policies(settings.source_policies)
    chosen = strategy.choose(meta, policies, Strategy(settings.strategy))
    if chosen is Strategy.PRODUCER_SEQUENCE:
        parsed = strategy.producer_sequence(meta)
        if not isinstance(parsed, str):
            return producer_identity(parsed)
    fingerprinted = strategy.FINGERPRINT_HEADER in dict(record.headers)
    if record.key is not None and settings.scope == "source" and meta.source and not fingerprinted:
        return strategy.scoped_key(record.key, meta.source)
    return record.key


def producer_identity(parsed: strategy.ProducerSequence) -> bytes:
    return b"\x00ps\x00" + parsed.producer + b"\x00" + str(parsed.sequence).encode()


@dataclass
class Expected:
    """What the clean and dead-letter topics must hold, derived from the input topic."""

    values: dict[bytes, bytes]
    bad: set[tuple[int, int]]  # (input partition, offset) of each bad record


def expected_from_input(records: list[Record], settings: Settings) -> Expected:
    """The worker's rules applied to the input in order: the first valid copy of each id is
    forwarded, every bad record dead-lettered (repeats assumed inside the window and cap)."""
    values: dict[bytes, bytes] = {}
    bad: set[tuple[int, int]] = set()
    policies = strategy.parse_policies(settings.source_policies)
    exclude = strategy.field_list(settings.fingerprint_exclude)
    for r in records:
        meta = strategy.read_meta(r.headers)
        chosen = strategy.choose(meta, policies, Strategy(settings.strategy))
        checked = rules.inspect(
            r.value,
            max_event_bytes=settings.max_event_bytes,
            max_id_bytes=settings.max_message_id_bytes,
        )
        key: bytes | None = None
        if chosen is Strategy.PRODUCER_SEQUENCE:
            parsed = strategy.producer_sequence(meta)
            id_only = isinstance(checked, rules.Valid) or checked.reason in strategy.ID_ONLY_REASONS
            if not isinstance(parsed, str) and id_only:
                key = producer_identity(parsed)
        elif isinstance(checked, rules.Valid):
            key = checked.id_bytes
            if settings.scope == "source" and meta.source:
                key = strategy.scoped_key(key, meta.source)
        elif (
            checked.reason is rules.BadInput.NO_MESSAGE_ID and settings.missing_id == "fingerprint"
        ):
            doc = rules.parse_object(r.value or b"")
            assert doc is not None
            key = strategy.fingerprint(doc, exclude).encode()
        if key is None:
            bad.add((r.partition, r.offset))
        else:
            values.setdefault(key, r.value or b"")
    return Expected(values, bad)
