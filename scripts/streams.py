"""Realistic event streams with client retries, for the demo, the tests and the benchmarks.

An event is a Segment-style JSON object (type, event, userId/anonymousId, timestamp, context,
properties, messageId). Repeats are byte-identical copies (a client retrying the same request)
and come in three kinds, the way they happen in production:

- immediate retries: the copy follows its original at once;
- late retries: the copy arrives thousands of records later (a queue redelivery);
- null-keyed copies: the copy has no key (a producer that did not key it), so Kafka's default
  partitioner puts it on a random partition and the worker must re-key it.

``build_stream`` is deterministic for a seed, so a failing test can be replayed exactly.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaProducer

EVENT_NAMES = ["Order Completed", "Product Viewed", "Signed Up", "Cart Viewed", "Page Viewed"]


@dataclass(frozen=True, slots=True)
class OutRecord:
    """A record to produce: ``key`` None means a null key (random partition)."""

    message_id: str
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


@dataclass
class Stream:
    records: list[OutRecord]
    #: messageId -> the value bytes every copy carries.
    unique: dict[str, bytes]

    @property
    def duplicates(self) -> int:
        return len(self.records) - len(self.unique)


def make_event(rng: random.Random, index: int, base_ms: int) -> tuple[str, bytes]:
    """One event of about 300 bytes, with a UUIDv4 or an ``ajs-`` prefixed hex messageId."""
    if rng.random() < 0.2:
        message_id = f"ajs-{rng.getrandbits(128):032x}"
    else:
        message_id = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    user = f"user-{rng.randrange(100_000)}"
    doc = {
        "type": "track",
        "event": EVENT_NAMES[index % len(EVENT_NAMES)],
        "userId": user,
        "anonymousId": str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(base_ms / 1000 + index))
        + ".000Z",
        "context": {"library": {"name": "analytics.js", "version": "4.1.0"}, "ip": "203.0.113.7"},
        "properties": {"revenue": round(rng.random() * 100, 2), "currency": "USD", "i": index},
        "messageId": message_id,
    }
    return message_id, json.dumps(doc, separators=(",", ":")).encode()


def build_stream(
    unique: int,
    duplicate_fraction: float,
    *,
    seed: int = 7,
    late_distance: int = 5_000,
    kinds: tuple[float, float, float] = (0.4, 0.4, 0.2),
) -> Stream:
    """``unique`` events plus ``duplicate_fraction * unique`` repeats (immediate, late, null-keyed
    in the proportions ``kinds``), in send order."""
    rng = random.Random(seed)
    base_ms = 1_790_000_000_000
    records: list[OutRecord] = []
    late: dict[int, list[OutRecord]] = {}
    values: dict[str, bytes] = {}
    n_dups = round(unique * duplicate_fraction)
    dup_at = set(rng.sample(range(unique), n_dups)) if n_dups <= unique else set(range(unique))
    for i in range(unique):
        for rec in late.pop(i, ()):
            records.append(rec)
        message_id, value = make_event(rng, i, base_ms)
        values[message_id] = value
        headers = (("content-type", b"application/json"),)
        original = OutRecord(message_id, message_id.encode(), value, headers)
        records.append(original)
        if i in dup_at:
            r = rng.random()
            if r < kinds[0]:
                records.append(original)
            elif r < kinds[0] + kinds[1]:
                at = i + rng.randrange(late_distance // 2, late_distance * 2)
                late.setdefault(at, []).append(original)
            else:
                copy = OutRecord(message_id, None, value, headers)
                if rng.random() < 0.5:
                    records.append(copy)
                else:
                    late.setdefault(i + rng.randrange(1, late_distance), []).append(copy)
    for at in sorted(late):
        records.extend(late[at])
    return Stream(records, values)


def build_mixed_stream(
    unique: int, duplicate_fraction: float, *, seed: int = 7, producers: int = 6
) -> Stream:
    """Events for every strategy, in send order, with ``duplicate_fraction`` repeats of each kind:

    - about a third with a messageId (as :func:`build_stream`: immediate, late and null-keyed
      copies);
    - about a third without one (deduplicated by fingerprint with DEDUPE_MISSING_ID=fingerprint),
      unkeyed, so every copy is re-keyed by its fingerprint; copies are byte-identical;
    - about a third from ``producers`` server-side producers (headers ``dedupe.producer`` and
      ``dedupe.sequence``), each writing its sequence in order, keyed by its name; a retry
      follows its original.

    ``unique`` maps each event's identity (the messageId, ``fp:<n>`` or ``<producer>:<seq>``)
    to its bytes."""
    rng = random.Random(seed)
    ids = build_stream(unique // 3, duplicate_fraction, seed=seed)
    records = list(ids.records)
    values = dict(ids.unique)
    base_ms = 1_790_000_000_000
    json_header = ("content-type", b"application/json")
    fingerprinted: list[OutRecord] = []
    for i in range(unique // 3):
        _, value = make_event(rng, i, base_ms)
        doc = json.loads(value)
        del doc["messageId"]
        body = json.dumps(doc, separators=(",", ":")).encode()
        rec = OutRecord(f"fp:{i}", None, body, (json_header,))
        values[rec.message_id] = body
        fingerprinted += [rec, rec] if rng.random() < duplicate_fraction else [rec]
    sequenced: list[OutRecord] = []
    names = [f"producer-{p}" for p in range(producers)]
    next_seq = dict.fromkeys(names, 0)
    for i in range(unique - 2 * (unique // 3)):
        name = names[rng.randrange(producers)]
        seq = next_seq[name]
        next_seq[name] = seq + rng.choice((1, 1, 1, 2))  # gaps are allowed
        _, value = make_event(rng, i, base_ms)
        headers = (
            json_header,
            ("dedupe.producer", name.encode()),
            ("dedupe.sequence", str(seq).encode()),
        )
        rec = OutRecord(f"{name}:{seq}", name.encode(), value, headers)
        values[rec.message_id] = value
        sequenced += [rec, rec] if rng.random() < duplicate_fraction else [rec]
    # Interleave the three kinds, keeping each one's own order.
    lanes = [records, fingerprinted, sequenced]
    merged: list[OutRecord] = []
    positions = [0, 0, 0]
    while any(positions[k] < len(lanes[k]) for k in range(3)):
        open_lanes = [k for k in range(3) if positions[k] < len(lanes[k])]
        weights = [len(lanes[k]) - positions[k] for k in open_lanes]
        k = rng.choices(open_lanes, weights)[0]
        merged.append(lanes[k][positions[k]])
        positions[k] += 1
    return Stream(merged, values)


async def produce(
    bootstrap: str,
    topic: str,
    records: Iterable[OutRecord],
    *,
    progress: bool = False,
    rate: float | None = None,
    patience: float = 40.0,
    client: Mapping[str, Any] | None = None,
    hurry: Callable[[], bool] | None = None,
) -> int:
    """Send ``records`` in order with an idempotent producer (acks=all); returns the count.
    ``rate``: at most this many records per second (a steady feed; default: as fast as can be).
    ``patience``: how long (seconds) a batch keeps being retried while the broker is away
    (aiokafka's request timeout, after which the batch fails). ``hurry()`` true: the rest as
    fast as can be."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        enable_idempotence=True,
        linger_ms=10,
        max_batch_size=256 * 1024,
        max_request_size=16 * 1024 * 1024,
        request_timeout_ms=round(patience * 1000),
        **(client or {}),
    )
    await producer.start()
    sent = 0
    started = time.monotonic()
    try:
        pending: list[asyncio.Future[object]] = []
        for rec in records:
            pending.append(
                await producer.send(topic, rec.value, key=rec.key, headers=list(rec.headers))
            )
            sent += 1
            if rate is not None and sent % 100 == 0 and not (hurry is not None and hurry()):
                await asyncio.sleep(max(0.0, started + sent / rate - time.monotonic()))
            if len(pending) >= 5_000:
                await asyncio.gather(*pending)
                pending.clear()
                if progress and sent % 50_000 == 0:
                    print(f"  produced {sent:,}", flush=True)
        await asyncio.gather(*pending)
    finally:
        await producer.stop()
    return sent
