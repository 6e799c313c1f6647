"""The kept changelog dump of changelog format 1 (tests/format_fixtures.py), produced into a
topic of the real broker one transaction at a time as a worker writes it, restores through the
worker's bulk restorer and changelog reader (recovery/restore.py, recovery/reader.py) into the
worker's store: every id, entry and source offset comes back exactly. A transaction of a newer
changelog format after it is refused (tables/formats.py), and nothing of it is applied.

    .venv/bin/python -m pytest tests/integration/test_changelog_fixture.py
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.client import AIOKafkaClient
from aiokafka.structs import TopicPartition

from recovery.reader import ChangelogReader
from recovery.restore import Restorer
from scripts.topic_admin import create_topics
from scripts.topic_reader import end_offsets
from tables.formats import CHANGELOG, CHANGELOG_FIELD, FormatRefused
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tests.format_fixtures import IDENTITY, ROOT, new_store, read_dump
from tests.support import Broker, Names
from tests.unit.tables.test_format_fixtures import assert_holds_the_fixture

pytestmark = pytest.mark.integration


async def produce_transactions(
    bootstrap: str, topic: str, txns: list[tuple[int, list[tuple[bytes, bytes | None]]]]
) -> None:
    """Each of ``txns`` (partition, records) as one committed transaction, as a worker's
    partition producer writes its changelog."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"{topic}-fixture")
    await producer.start()
    try:
        for partition, records in txns:
            async with producer.transaction():
                for key, value in records:
                    await producer.send(topic, value, key=key, partition=partition)
    finally:
        await producer.stop()


async def restore_all(bootstrap: str, topic: str, tables_parent: Path) -> None:
    """Restore every partition of ``topic`` to its end with the worker's bulk restorer."""
    store = new_store(tables_parent)
    reader = ChangelogReader(
        lambda: AIOKafkaClient(bootstrap_servers=bootstrap), fetch_bytes=1 << 20, max_wait_ms=20
    )
    restorer = Restorer(reader)
    try:
        ends = await end_offsets(bootstrap, topic)
        for partition in range(IDENTITY.partitions):
            tp = TopicPartition(topic, partition)
            assert await restorer.restore(store, tp, ends[partition], lambda: True)
        assert_holds_the_fixture(store)
    finally:
        await restorer.close()
        for partition in range(IDENTITY.partitions):
            store.close_partition(partition)


def test_the_changelog_dump_restores_from_the_broker_and_a_newer_format_is_refused(
    broker: Broker, names: Names, tmp_path: Path
) -> None:
    topic = f"{names.app_id}-seen_ids-changelog"
    dump = read_dump(ROOT / "changelog.jsonl")
    txns: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}
    for partition, txn, key, value in dump:
        txns.setdefault((partition, txn), []).append((key, value))
    # 300 ids, 5 tombstones, a source-offsets record in each of 4 transactions per partition.
    assert len(dump) == 300 + 5 + 8 and len(txns) == 8

    async def run() -> None:
        await create_topics(
            broker.bootstrap, [topic], IDENTITY.partitions, config={"cleanup.policy": "compact"}
        )
        await produce_transactions(
            broker.bootstrap, topic, [(p, records) for (p, _n), records in txns.items()]
        )
        await restore_all(broker.bootstrap, topic, tmp_path)
        # A worker of a later version writes a transaction in its changelog format.
        newer = {IDENTITY.input_topic: 10_000, CHANGELOG_FIELD: CHANGELOG.current + 1}
        await produce_transactions(
            broker.bootstrap,
            topic,
            [
                (
                    0,
                    [
                        (b"written-by-a-newer-version", b"\x00" * 24),
                        (SOURCE_OFFSETS_KEY, json.dumps(newer).encode()),
                    ],
                )
            ],
        )
        with pytest.raises(FormatRefused, match="partition 0 is in changelog format 2"):
            await restore_all(broker.bootstrap, topic, tmp_path)

    asyncio.run(run())
    # What the refused restore left: the fixture, exactly, and not the newer transaction.
    store = new_store(tmp_path)
    try:
        assert store.committed_get(0, b"written-by-a-newer-version") is None
        assert_holds_the_fixture(store)
    finally:
        for partition in range(IDENTITY.partitions):
            store.close_partition(partition)
