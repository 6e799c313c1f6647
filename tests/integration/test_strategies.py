"""Every dedup strategy on real workers and the real broker, in one stream: message ids per
source (DEDUPE_SCOPE=source), a reused id (DEDUPE_VERIFY_CONTENT), events without an id
(DEDUPE_MISSING_ID=fingerprint), producer sequences (repeats at or below the highest; one
producer written to another partition, in order, and re-keyed by name), a source whose policy
is off, bad producer headers; then /producers/{name} and /stats from both workers."""

from __future__ import annotations

import asyncio
import json
import random
from collections import Counter

import pytest
from aiokafka import AIOKafkaProducer

from app import strategy
from app.rules import partition_for
from scripts.topic_reader import read_topic
from tests.integration.test_worker_endpoints import both_ready
from tests.support import Broker, Names
from tests.workers import Worker, get, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4
ENV = {
    "DEDUPE_SOURCE_POLICIES": "legacy=off,web=message_id",
    "DEDUPE_SCOPE": "source",
    "DEDUPE_MISSING_ID": "fingerprint",
    "DEDUPE_VERIFY_CONTENT": "true",
}
EXCLUDE = strategy.field_list("sentAt,receivedAt,_metadata")

#: key, value, headers, explicit partition (None: by key)
Record = tuple[bytes | None, bytes, list[tuple[str, bytes]], int | None]


def ev(**fields: object) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def stream() -> tuple[list[Record], dict[str, int]]:
    """The records (each planned copy listed) and what must come out of each kind."""
    rng = random.Random(7)
    records: list[Record] = []
    web, api = [("dedupe.source", b"web")], [("dedupe.source", b"api")]
    for i in range(100):  # the same ids from two sources: two events each, each sent twice
        for source in (web, api):
            body = ev(messageId=f"m-{i}", event="Viewed", n=i)
            records += [(f"m-{i}".encode(), body, source, None)] * 2
    for i in range(20):  # reused ids: the second event with the same id is dead-lettered
        records.append((f"r-{i}".encode(), ev(messageId=f"r-{i}", event="A"), web, None))
        records.append((f"r-{i}".encode(), ev(messageId=f"r-{i}", event="B"), web, None))
    for i in range(60):  # no messageId: fingerprinted; retries differ in sentAt only; no key
        for sent_at in ("2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z"):
            records.append((None, ev(type="track", event="Webhook", n=i, sentAt=sent_at), [], None))
    # Producer sequences: a producer writes its records in order to one partition, keyed by
    # its name (billing-1, billing-2) or, billing-3, unkeyed to another partition (re-keyed).
    elsewhere = (partition_for(b"billing-3", PARTITIONS) + 1) % PARTITIONS
    for name in ("billing-1", "billing-2", "billing-3"):
        key, where = (None, elsewhere) if name == "billing-3" else (name.encode(), None)
        for seq in range(80):
            headers = [("dedupe.producer", name.encode()), ("dedupe.sequence", str(seq).encode())]
            body = ev(producer=name, seq=seq)
            records.append((key, body, headers, where))
            if seq % 3 == 0:
                records.append((key, body, headers, where))  # a retried send
    for i in range(30):  # policy off: every copy goes out
        body = ev(messageId=f"legacy-{i}")
        records += [(f"legacy-{i}".encode(), body, [("dedupe.source", b"legacy")], None)] * 2
    bad = [("dedupe.producer", b"billing-9"), ("dedupe.sequence", b"12x")]
    records += [(b"x", ev(n=1), bad, None)] * 5
    rng.shuffle(records)
    # producer sequences must arrive in order per producer for "at or below" to mean repeat
    ordered = iter(sorted((r for r in records if _producer(r)), key=_producer_order))
    records = [next(ordered) if _producer(r) else r for r in records]
    expected = {
        "message_id": 200 + 20,
        "fingerprint": 60,
        "producer_sequence": 3 * 80,
        "legacy": 60,
        "reused": 20,
        "bad_producer_sequence": 5,
    }
    return records, expected


def _producer(r: Record) -> bytes | None:
    headers = dict(r[2])
    return headers.get("dedupe.producer") if "dedupe.sequence" in headers else None


def _producer_order(r: Record) -> tuple[bytes, int]:
    headers = dict(r[2])
    seq = headers["dedupe.sequence"]
    return headers["dedupe.producer"], int(seq) if seq.isdigit() else -1


async def produce(bootstrap: str, topic: str, records: list[Record]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
    await producer.start()
    try:
        for key, value, headers, partition in records:
            await producer.send(topic, value, key=key, headers=headers, partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


def test_every_strategy_end_to_end_with_two_workers(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    a = Worker(broker, names, index=0, partitions=PARTITIONS, extra_env=ENV)
    b = Worker(broker, names, index=1, partitions=PARTITIONS, extra_env=ENV)
    workers.extend([a, b])
    a.start()
    a.wait_ready()
    b.start()
    both_ready(a, b, PARTITIONS)
    records, expected = stream()
    asyncio.run(produce(broker.bootstrap, names.input_topic, records))
    wait_drained(broker, names, timeout=240, workers=workers)

    out = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    dlq = asyncio.run(read_topic(broker.bootstrap, names.dlq_topic))
    kinds: Counter[str] = Counter()
    seen: Counter[tuple[str, bytes | None, bytes | None]] = Counter()
    for r in out:
        headers = dict(r.headers)
        assert r.partition == partition_for(r.key or b"", PARTITIONS)
        if "dedupe.producer" in headers:
            kinds["producer_sequence"] += 1
            assert r.key == headers["dedupe.producer"]
            seen[("ps", r.key, headers["dedupe.sequence"])] += 1
        elif "dedupe.fingerprint" in headers:
            kinds["fingerprint"] += 1
            doc = json.loads(r.value or b"")
            assert (
                r.key
                == headers["dedupe.fingerprint"]
                == strategy.fingerprint(doc, EXCLUDE).encode()
            )
            assert doc["sentAt"] in ("2026-01-01T00:00:00Z", "2026-01-01T00:00:05Z")
            seen[("fp", r.key, None)] += 1
        elif headers.get("dedupe.source") == b"legacy":
            kinds["legacy"] += 1
        else:
            kinds["message_id"] += 1
            seen[("id", r.key, headers.get("dedupe.source"))] += 1
    reasons = Counter(dict(r.headers)["dedupe.error"].decode() for r in dlq)
    kinds["reused"] = reasons["messageId-reused"]
    kinds["bad_producer_sequence"] = reasons["bad_producer_sequence"]
    assert dict(kinds) == expected, (kinds, reasons)
    assert max(seen.values()) == 1  # no event twice
    assert sum(reasons.values()) == expected["reused"] + expected["bad_producer_sequence"]
    # each reused id: whichever event came first went out, the other was refused
    first = {
        json.loads(r.value or b"")["messageId"]: json.loads(r.value or b"")["event"]
        for r in out
        if (r.key or b"").startswith(b"r-")
    }
    refused = {
        json.loads(r.value or b"")["messageId"]: json.loads(r.value or b"")["event"]
        for r in dlq
        if dict(r.headers)["dedupe.error"] == b"messageId-reused"
    }
    assert sorted(first) == sorted(refused) == sorted(f"r-{i}" for i in range(20))
    assert all({first[i], refused[i]} == {"A", "B"} for i in first)

    for asked in (a, b):  # any worker answers for any producer (routed to the owner)
        for name in ("billing-1", "billing-2", "billing-3"):
            status, body = get(asked, f"/producers/{name}")
            assert status == 200, body
            assert body["producer"] == name and body["last_sequence"] == 79
            assert body["partition"] == partition_for(name.encode(), PARTITIONS)
        assert get(asked, "/producers/never-sent")[0] == 404
        status, body = get(asked, "/messages/m-3?source=api")
        assert status == 200 and body["held"] is True, body

    stats = [get(w, "/stats")[1] for w in (a, b)]
    assert stats[0]["policy"] == {
        "default": "message_id",
        "sources": {"legacy": "off", "web": "message_id"},
        "scope": "source",
        "missing_id": "fingerprint",
        "verify_content": True,
        "window_from": "first_seen",
        "sources_window_from": {},
    }
    per_strategy: Counter[tuple[str, str]] = Counter()
    for s in stats:
        for p in s["partitions"].values():
            for name, outcomes in p["by_strategy"].items():
                per_strategy.update({(name, o): n for o, n in outcomes.items()})
    assert per_strategy[("off", "forwarded")] == 60
    assert per_strategy[("producer_sequence", "forwarded")] == 240
    assert per_strategy[("message_id", "messageId_reused")] == 20
    assert sum(p["producers_held"] for s in stats for p in s["partitions"].values()) == 3
