"""The input contract on the real broker: bad input is dead-lettered exactly once with its
original bytes and a reason; records not keyed or placed by their messageId are re-keyed and
still deduplicated; the output keeps the first copy's bytes and headers."""

from __future__ import annotations

import asyncio
import json

import pytest
from aiokafka import AIOKafkaProducer

from app import rules
from scripts.topic_reader import read_topic
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4


def event(message_id: object, **extra: object) -> bytes:
    return json.dumps({"type": "track", "event": "Test", "messageId": message_id, **extra}).encode()


def other_partition(message_id: str) -> int:
    return (rules.partition_for(message_id.encode(), PARTITIONS) + 1) % PARTITIONS


BAD = {
    # reason: (key, value)
    "not_json": (b"k1", b"{this is not json"),
    "not_utf8": (b"k2", b'{"messageId": "\xff\xfe"}'),
    "not_object": (b"k3", b'["messageId", "x"]'),
    "no_message_id": (b"k4", json.dumps({"type": "track", "userId": "u1"}).encode()),
    "message_id_not_string": (b"k5", event(12345)),
    "empty_message_id": (b"k6", event("")),
    "message_id_too_long": (b"k7", event("x" * 257)),
    "too_large": (b"k8", event("big-1", pad="p" * 40_000)),
    "null_value": (b"k9", None),
    "huge_value": (b"k10", event("huge-1", pad="h" * 1_000_000)),
}


async def send_all(
    bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None, int | None, list]]
) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", max_request_size=4 * 1024 * 1024
    )
    await producer.start()
    try:
        for key, value, partition, headers in records:
            await producer.send_and_wait(
                topic, value, key=key, partition=partition, headers=headers
            )
    finally:
        await producer.stop()


def test_bad_input_is_dead_lettered_once_and_the_partition_keeps_flowing(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    records = []
    for i, (key, value) in enumerate(BAD.values()):
        records.append((key, value, 0, [("origin", f"bad-{i}".encode())]))
        good_id = f"good-after-{i}"
        records.append(
            (
                good_id.encode(),
                event(good_id),
                rules.partition_for(good_id.encode(), PARTITIONS),
                [],
            )
        )
    asyncio.run(send_all(broker.bootstrap, names.input_topic, records))
    wait_drained(broker, names, timeout=120, workers=workers)

    dlq = asyncio.run(read_topic(broker.bootstrap, names.dlq_topic))
    assert len(dlq) == len(BAD)
    reasons = sorted(dict(r.headers)["dedupe.error"].decode() for r in dlq)
    assert reasons == sorted(r if r != "huge_value" else "too_large" for r in BAD)
    for i, (reason, (key, value)) in enumerate(BAD.items()):
        matches = [r for r in dlq if r.value == value and r.key == key]
        assert len(matches) == 1, reason
        rec = matches[0]
        headers = dict(rec.headers)
        assert rec.headers[0] == ("origin", f"bad-{i}".encode())  # original headers kept, first
        assert headers["dedupe.source.topic"] == names.input_topic.encode()
        assert headers["dedupe.source.partition"] == b"0"
        assert int(headers["dedupe.source.offset"]) >= 0
        assert headers["dedupe.error.detail"]
    out = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    assert sorted(r.key for r in out) == sorted(f"good-after-{i}".encode() for i in range(len(BAD)))
    assert worker.alive()


def test_misplaced_copies_are_rekeyed_and_deduplicated(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    records = []
    ids = [f"id-{i}" for i in range(40)]
    for mid in ids:
        right = rules.partition_for(mid.encode(), PARTITIONS)
        first = ("first", mid.encode())
        records.append((mid.encode(), event(mid), right, [first]))  # the original
        records.append((None, event(mid), other_partition(mid), [("copy", b"null-key")]))
        records.append((b"someone-else", event(mid), None, [("copy", b"other-key")]))
        records.append((mid.encode(), event(mid), other_partition(mid), [("copy", b"wrong-part")]))
        records.append((mid.encode(), event(mid), right, [("copy", b"same-partition")]))
    # ids that only ever arrive misplaced still come out once
    lonely = [f"lonely-{i}" for i in range(10)]
    for mid in lonely:
        records.append((None, event(mid), other_partition(mid), []))
        records.append((b"x", event(mid), other_partition(mid), []))
    asyncio.run(send_all(broker.bootstrap, names.input_topic, records))
    wait_drained(broker, names, timeout=120, workers=workers)

    out = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    keys = [r.key for r in out]
    assert sorted(keys) == sorted(m.encode() for m in ids + lonely)
    for r in out:
        assert r.partition == rules.partition_for(r.key or b"", PARTITIONS)
        assert r.value == event((r.key or b"").decode())
    # The original was written before any misplaced copy could be re-keyed back, so for the
    # ids with a correctly placed original, its headers are the ones forwarded.
    firsts = [r for r in out if r.key and r.key.startswith(b"id-")]
    assert all(r.headers == (("first", r.key),) for r in firsts)
    repart = asyncio.run(read_topic(broker.bootstrap, names.repartition_topic))
    assert len(repart) == 3 * len(ids) + 2 * len(lonely)
    assert asyncio.run(read_topic(broker.bootstrap, names.dlq_topic)) == []


def test_the_first_copy_of_an_id_wins_with_its_bytes_and_headers(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=PARTITIONS)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    mid = "same-id"
    p = rules.partition_for(mid.encode(), PARTITIONS)
    copies = [
        (mid.encode(), event(mid, attempt=n), p, [("attempt", str(n).encode())]) for n in range(5)
    ]
    asyncio.run(send_all(broker.bootstrap, names.input_topic, copies))
    wait_drained(broker, names, timeout=120, workers=workers)
    out = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
    assert [(r.key, r.value, r.headers) for r in out] == [
        (mid.encode(), event(mid, attempt=0), (("attempt", b"0"),))
    ]
