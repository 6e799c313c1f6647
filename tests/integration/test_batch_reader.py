"""The changelog reader (recovery/reader.py) on the real broker reads exactly what aiokafka's
read_committed consumer reads, offsets included: committed transactions interleaved with
aborted ones of another producer, non-transactional records, compressed batches, fetches that
end inside a transaction; and a changelog whose first records were deleted goes on from its
log start.

Also here, as the raw batches show it: the worker writes its changelog in zstd batches by
default (``DEDUPE_CHANGELOG_COMPRESSION``) and its clean topic as ``DEDUPE_COMPRESSION`` says."""

from __future__ import annotations

import asyncio
import logging

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.structs import TopicPartition

from recovery.reader import ChangelogReader
from scripts.streams import build_stream, produce
from scripts.topic_admin import create_topics
from scripts.topic_reader import end_offsets, read_topic
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration


async def write_mixed(bootstrap: str, topic: str) -> None:
    """Per partition: two transactional producers, one committing and one aborting, their
    transactions interleaved; then records of a producer without transactions. The committing
    producer compresses its batches."""
    good = AIOKafkaProducer(
        bootstrap_servers=bootstrap, transactional_id=f"{topic}-good", compression_type="gzip"
    )
    bad = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-bad")
    plain = AIOKafkaProducer(bootstrap_servers=bootstrap)
    for producer in (good, bad, plain):
        await producer.start()
    try:
        for round_ in range(6):
            await good.begin_transaction()
            await bad.begin_transaction()
            for i in range(40):
                for partition in (0, 1):
                    key = f"good-{round_}-{i}-{partition}".encode()
                    await good.send(topic, b"v" * (i % 50), key=key, partition=partition)
                    junk = f"bad-{round_}-{i}-{partition}".encode()
                    await bad.send(topic, b"x", key=junk, partition=partition)
                if i == 20:
                    await good.flush()
                    await bad.flush()
            await bad.abort_transaction()
            await good.commit_transaction()
        for i in range(30):
            await plain.send(topic, None, key=f"plain-{i}".encode(), partition=i % 2)
        await plain.flush()
    finally:
        for producer in (good, bad, plain):
            await producer.stop()


async def read_all(
    bootstrap: str, topic: str, partition: int, fetch_bytes: int
) -> list[tuple[bytes, bytes | None]]:
    reader = ChangelogReader(
        lambda: AIOKafkaClient(bootstrap_servers=bootstrap), fetch_bytes=fetch_bytes, max_wait_ms=20
    )
    tp = TopicPartition(topic, partition)
    out: list[tuple[bytes, bytes | None]] = []
    try:
        end = (await end_offsets(bootstrap, topic))[partition]
        offset, fetches = 0, 0
        while offset < end:
            fetched = await reader.fetch(tp, offset, end)
            out.extend(fetched.records)
            assert fetched.next_offset > offset or fetched.records == []
            offset, fetches = fetched.next_offset, fetches + 1
        assert fetches > 0
    finally:
        await reader.close()
    return out


@pytest.mark.parametrize("fetch_bytes", [1024, 8 * 1024 * 1024])
def test_the_reader_reads_what_a_read_committed_consumer_reads(
    broker: Broker, names: Names, fetch_bytes: int
) -> None:
    topic = f"{names.changelog_topic}-{fetch_bytes}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 2))
    asyncio.run(write_mixed(broker.bootstrap, topic))
    expected = asyncio.run(read_topic(broker.bootstrap, topic))
    for partition in (0, 1):
        want = [(r.key, r.value) for r in expected if r.partition == partition]
        assert len(want) == 6 * 40 + 15
        assert not any(k is not None and k.startswith(b"bad-") for k, _ in want)
        got = asyncio.run(read_all(broker.bootstrap, topic, partition, fetch_bytes))
        assert got == want


async def first_committed(
    reader: ChangelogReader, tp: TopicPartition, start: int, end: int
) -> int | None:
    """Offset of the first record a read_committed consumer sees in ``[start, end)`` by the
    reader's fetches, or None: only commit markers and aborted records lie there."""
    position = start
    while position < end:
        fetched = await reader.fetch(tp, position, end)
        if fetched.first_offset is not None:
            return fetched.first_offset
        assert fetched.next_offset > position, f"no fetch got past offset {position}"
        position = fetched.next_offset
    return None


async def read_offsets(
    bootstrap: str, topic: str, partition: int, fetch_bytes: int
) -> tuple[list[tuple[int, bytes, bytes | None]], int]:
    """Every committed record of the partition with its offset (:func:`first_committed`, from
    after the previous one), its key and value from the fetches; and the last stable offset the
    last fetch reported."""
    reader = ChangelogReader(
        lambda: AIOKafkaClient(bootstrap_servers=bootstrap), fetch_bytes=fetch_bytes, max_wait_ms=20
    )
    tp = TopicPartition(topic, partition)
    out: list[tuple[int, bytes, bytes | None]] = []
    try:
        end = (await end_offsets(bootstrap, topic))[partition]
        at = 0
        while (found := await first_committed(reader, tp, at, end)) is not None:
            fetched = await reader.fetch(tp, found, found + 1)
            assert fetched.first_offset == found and len(fetched.records) == 1
            key, value = fetched.records[0]
            out.append((found, key, value))
            at = found + 1
        stable = (await reader.fetch(tp, 0, end)).stable
    finally:
        await reader.close()
    return out, stable


@pytest.mark.parametrize("fetch_bytes", [1024, 8 * 1024 * 1024])
def test_the_reader_finds_each_committed_record_at_the_consumers_offset(
    broker: Broker, names: Names, fetch_bytes: int
) -> None:
    """The same interleaved committed and aborted transactions read with aiokafka's
    read_committed consumer and with the reader: the same records at the same offsets, and
    nothing committed between the last of them and the end (commit markers only)."""
    topic = f"{names.changelog_topic}-offsets-{fetch_bytes}"
    asyncio.run(create_topics(broker.bootstrap, [topic], 2))
    asyncio.run(write_mixed(broker.bootstrap, topic))
    expected = asyncio.run(read_topic(broker.bootstrap, topic))
    ends = asyncio.run(end_offsets(broker.bootstrap, topic))
    for partition in (0, 1):
        want = [(r.offset, r.key, r.value) for r in expected if r.partition == partition]
        assert len(want) == 6 * 40 + 15
        got, stable = asyncio.run(read_offsets(broker.bootstrap, topic, partition, fetch_bytes))
        assert got == want
        # Aborted records lie between committed ones: the offsets are not consecutive.
        assert want[-1][0] + 1 - want[0][0] > len(want)
        assert stable == ends[partition]


def test_a_changelog_whose_first_records_were_deleted_is_read_from_its_log_start(
    broker: Broker, names: Names, caplog: pytest.LogCaptureFixture
) -> None:
    topic = names.changelog_topic
    asyncio.run(create_topics(broker.bootstrap, [topic], 1))

    async def scenario() -> tuple[int, list[tuple[bytes, bytes | None]]]:
        producer = AIOKafkaProducer(bootstrap_servers=broker.bootstrap)
        await producer.start()
        try:
            for i in range(20):
                await producer.send(topic, b"v", key=f"k{i}".encode(), partition=0)
            await producer.flush()
        finally:
            await producer.stop()
        tp = TopicPartition(topic, 0)
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.delete_records({tp: RecordsToDelete(before_offset=12)})
        finally:
            await admin.close()
        reader = ChangelogReader(
            lambda: AIOKafkaClient(bootstrap_servers=broker.bootstrap),
            fetch_bytes=1 << 20,
            max_wait_ms=20,
        )
        try:
            skipped = await reader.fetch(tp, 3, 20)
            assert skipped.records == []
            rest = await reader.fetch(tp, skipped.next_offset, 20)
            return skipped.next_offset, rest.records
        finally:
            await reader.close()

    with caplog.at_level(logging.WARNING, logger="recovery.reader"):
        start, records = asyncio.run(scenario())
    assert start == 12
    assert [k for k, _ in records] == [f"k{i}".encode() for i in range(12, 20)]
    assert "starts at offset 12, after the 3 asked for" in caplog.text


async def codecs(bootstrap: str, topic: str) -> set[int]:
    """The compression codec of every record batch in partition 0 of ``topic``, but for commit
    markers and the source-offsets record each transaction sends on its own (with the
    producer's compression)."""
    client = AIOKafkaClient(bootstrap_servers=bootstrap)
    await client.bootstrap()
    try:
        await client.add_topic(topic)
        node = client.cluster.leader_for_partition(TopicPartition(topic, 0))
        request = FetchRequest(100, 1, 1 << 24, 1, [(topic, [(0, 0, 1 << 24)])])
        response = await client.send(node, request)
        raw = response.topics[0][1][0][-1]
        batches, found = MemoryRecords(raw), set()
        while batches.has_next():
            batch = batches.next_batch()
            if batch.is_control_batch:
                continue
            if [r.key for r in batch] != [SOURCE_OFFSETS_KEY]:
                found.add(batch.compression_type)
        return found
    finally:
        await client.close()


@pytest.mark.parametrize(("output", "expected"), [("none", 0), ("lz4", 3)])
def test_the_worker_compresses_its_changelog_with_zstd_and_its_output_as_told(
    broker: Broker, names: Names, workers: list[Worker], output: str, expected: int
) -> None:
    worker = Worker(broker, names, partitions=1, extra_env={"DEDUPE_COMPRESSION": output})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    asyncio.run(
        produce(broker.bootstrap, names.input_topic, build_stream(300, 0.2, seed=5).records)
    )
    wait_drained(broker, names, timeout=120, workers=workers)
    zstd = 4  # the codec bits of a v2 batch's attributes (lz4: 3, none: 0)
    assert asyncio.run(codecs(broker.bootstrap, names.changelog_topic)) == {zstd}
    assert asyncio.run(codecs(broker.bootstrap, names.output_topic)) == {expected}
