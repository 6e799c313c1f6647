"""The fakes the commit protocol's fast tests run on (tests/unit/app/eos/test_commit*.py,
tests/unit/app/faults/test_faults.py): a producer, its producers, the broker and the store, as
``app.eos.commit.Committer`` sees them, and ``setup`` that wires one committer to them."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from aiokafka.structs import TopicPartition

from app.eos import Committer, Task

SOURCE = TopicPartition("events", 3)

OUT = TopicPartition("events-clean", 3)

CHANGELOG = TopicPartition("app-seen_ids-changelog", 3)

TIMEOUT = 0.05


class Builder:
    """aiokafka's batch builder as the collector uses it."""

    def __init__(self, made_by: str = "producer") -> None:
        self.records: list[bytes | None] = []
        self.closed = False
        #: "producer" (the producer's compression) or "changelog" (the changelogs' own).
        self.made_by = made_by

    def append(self, *, timestamp: Any, key: Any, value: bytes | None, headers: Any) -> Any:
        assert not self.closed
        self.records.append(value)
        return object()

    def close(self) -> None:
        self.closed = True

    def record_count(self) -> int:
        return len(self.records)


class Producer:
    """A transactional producer whose every step can fail as the test says (the unit tests'
    ``MockProducer``; tests/unit/app/faults/test_faults.py mixes the fault tests' commit actions
    in)."""

    def __init__(self, name: str = "p1") -> None:
        self.name = name
        self.calls: list[str] = []
        #: Set when the commit request went out.
        self.asked_to_commit = asyncio.Event()
        self.next_offset = 100
        self.send_error: BaseException | None = None
        self.offsets_error: BaseException | None = None
        self.commit_error: BaseException | None = None
        self.commit_hangs = False
        self.abort_error: BaseException | None = None
        self.sent: list[tuple[str, int, int]] = []  # (topic, partition, records)
        self.batches_made_by: dict[str, str] = {}  # topic -> Builder.made_by
        self.offsets: list[tuple[dict[TopicPartition, int], str]] = []
        self._message_accumulator = SimpleNamespace(flush_for_commit=self._flush)

    async def _flush(self) -> None:
        self.calls.append("flush")

    def create_batch(self) -> Builder:
        return Builder()

    def _answer(self, records: int) -> asyncio.Future[Any]:
        fut: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        if self.send_error is not None:
            fut.set_exception(self.send_error)
        else:
            fut.set_result(SimpleNamespace(offset=self.next_offset))
            self.next_offset += records + 1  # a commit marker after each batch, say
        return fut

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> Any:
        self.calls.append(f"send_batch {topic}")
        self.sent.append((topic, partition, builder.record_count()))
        self.batches_made_by[topic] = builder.made_by
        return self._answer(builder.record_count())

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        self.calls.append("send_offsets")
        if self.offsets_error is not None:
            raise self.offsets_error
        self.offsets.append((dict(offsets), group_id))

    async def commit_transaction(self) -> None:
        self.calls.append("commit")
        self.asked_to_commit.set()
        if self.commit_hangs:
            await asyncio.sleep(3600)  # the answer is lost
        if self.commit_error is not None:
            raise self.commit_error

    async def abort_transaction(self) -> None:
        self.calls.append("abort")
        if self.abort_error is not None:
            raise self.abort_error


class Producers:
    """``TransactionalProducers``: a start hands out a fresh producer (fencing the old one)."""

    def __init__(self) -> None:
        self.started: list[Producer] = []
        self.closed: list[Producer] = []

    async def start(self, partition: int) -> Producer:
        producer = Producer(f"p{len(self.started) + 2}")
        self.started.append(producer)
        return producer

    async def close(self, producer: Producer) -> None:
        self.closed.append(producer)

    def changelog_batch(self) -> Builder:
        return Builder("changelog")


class Broker:
    """The group's committed offsets, as the broker answers after an unknown outcome."""

    def __init__(self, committed: dict[TopicPartition, int]) -> None:
        self.committed = committed
        self.asked: list[list[TopicPartition]] = []

    async def committed_offsets_retrying(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        self.asked.append(tps)
        return self.committed


class Store:
    """The table's store: staged writes (its changelog records) and the source offsets."""

    def __init__(self) -> None:
        self.staged: list[tuple[int, bytes]] = []
        self.writes: dict[int, dict[bytes, bytes | None]] = {}

    def changelog_records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        return list(self.writes.get(partition, {}).items())

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        raise AssertionError("the manager applies, never the commit")

    def discard_partition(self, partition: int) -> None:
        raise AssertionError("the manager discards, never the commit")

    def stage_source_offsets(self, partition: int, value: bytes) -> None:
        self.staged.append((partition, value))

    def source_offsets(self, partition: int) -> dict[str, int]:
        return {}


def setup(
    *,
    records: int = 2,
    committed: dict[TopicPartition, int] | None = None,
    producer: Producer | None = None,
) -> tuple[Committer, Task, Producer, Producers, Broker, Store]:
    """A task with ``records`` processed records (an output record each, and a staged write
    of its id in the store) in its open transaction on ``producer`` (a fresh fake unless
    given), and a committer pulling the store's changelog and keeping source offsets in it."""
    producer = producer or Producer()
    task = Task(3, "app-events-3", producer=producer)  # type: ignore[arg-type]
    task.in_transaction = True
    producers, broker, store = Producers(), Broker(committed or {}), Store()
    for i in range(records):
        assert task.collector.append_now(producer, OUT, b"k", b"out")  # type: ignore[arg-type]
        store.writes.setdefault(3, {})[f"id-{i}".encode()] = b"seen"
        task.offsets[SOURCE] = task.positions[SOURCE] = 10 + i + 1
        task.records += 1
    committer = Committer(producers, broker, "app", TIMEOUT)  # type: ignore[arg-type]
    committer.keep_source_offsets(store, CHANGELOG.topic)
    committer.add_changelog(store, CHANGELOG.topic)
    return committer, task, producer, producers, broker, store
