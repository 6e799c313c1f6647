"""The commit protocol (``app.eos.commit.Committer``), one outcome per test, with a fake
producer: what each failure at each step becomes, and what is never done (an abort after the
commit request went out). The real broker's side of the same paths is in tests/faults (F2, F8,
F8a); these run in milliseconds, so a change to the protocol is judged at once."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, ProducerFenced
from aiokafka.structs import TopicPartition

from app.eos import Committer, Outcome, Task
from app.fault_points import NO_FAULTS, FaultPoints
from app.metrics import REGISTRY
from tables.source_offsets import SOURCE_OFFSETS_KEY

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
    """A transactional producer whose every step can fail as the test says."""

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

    async def send(self, topic: str, *, key: bytes, value: bytes, partition: int) -> Any:
        self.calls.append(f"send {topic}")
        assert key == SOURCE_OFFSETS_KEY
        self.sent.append((topic, partition, 1))
        return self._answer(1)

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
    points: FaultPoints = NO_FAULTS,
) -> tuple[Committer, Task, Producer, Producers, Broker, Store]:
    """A task with ``records`` processed records (an output record each, and a staged write
    of its id in the store) in its open transaction, and a committer pulling the store's
    changelog and keeping source offsets in it."""
    producer = Producer()
    task = Task(3, "app-events-3", producer=producer)  # type: ignore[arg-type]
    task.in_transaction = True
    producers, broker, store = Producers(), Broker(committed or {}), Store()
    for i in range(records):
        assert task.collector.append_now(producer, OUT, b"k", b"out")  # type: ignore[arg-type]
        store.writes.setdefault(3, {})[f"id-{i}".encode()] = b"seen"
        task.offsets[SOURCE] = task.positions[SOURCE] = 10 + i + 1
        task.records += 1
    committer = Committer(producers, broker, "app", TIMEOUT, points)  # type: ignore[arg-type]
    committer.keep_source_offsets(store, CHANGELOG.topic)
    committer.add_changelog(store, CHANGELOG.topic)
    return committer, task, producer, producers, broker, store


async def test_a_commit_sends_everything_then_asks_to_commit_once() -> None:
    committer, task, producer, producers, _, store = setup()
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert producer.calls == [
        "send_batch events-clean",
        f"send_batch {CHANGELOG.topic}",
        f"send {CHANGELOG.topic}",  # the source offsets' record
        "flush",
        "send_offsets",
        "commit",
    ]
    assert producer.offsets == [({SOURCE: 12}, "app")]
    # output at 100-101, the two staged writes at 103-104, the offsets' record at 106
    assert result.changelog_offsets == {CHANGELOG.topic: 106}
    assert (CHANGELOG.topic, 3, 2) in producer.sent  # pulled from the store, to partition 3
    # The changelog's batch is built with the changelogs' own compression, the output's with
    # the producer's.
    assert producer.batches_made_by == {"events-clean": "producer", CHANGELOG.topic: "changelog"}
    assert store.staged and store.staged[0][0] == 3
    assert producers.started == []


async def test_nothing_open_is_nothing_to_commit() -> None:
    committer, task, producer, *_ = setup(records=0)
    task.in_transaction = False
    assert (await committer.commit(task)).outcome is Outcome.NOTHING
    assert producer.calls == []


async def test_a_transaction_without_a_processed_record_is_aborted() -> None:
    committer, task, producer, *_ = setup(records=0)
    assert (await committer.commit(task)).outcome is Outcome.ABORTED
    assert producer.calls == ["abort"]


async def test_fenced_at_send() -> None:
    committer, task, producer, producers, *_ = setup()
    producer.send_error = ProducerFenced()
    result = await committer.commit(task)
    assert result.outcome is Outcome.FENCED
    assert "commit" not in producer.calls and "abort" not in producer.calls
    assert producers.started == []  # a fenced producer is not replaced: the task stops


async def test_a_send_error_fails_the_transaction_and_aborts_it() -> None:
    committer, task, producer, *_ = setup()
    producer.send_error = KafkaTimeoutError("batch expired")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert "before the commit" in result.why
    assert producer.calls[-1] == "abort" and "commit" not in producer.calls


async def test_the_broker_gone_before_the_commit_fails_and_a_producer_that_cannot_abort_goes() -> (
    None
):
    committer, task, producer, producers, *_ = setup()
    producer.offsets_error = KafkaConnectionError("broker gone")
    producer.abort_error = KafkaConnectionError("broker gone")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert producers.closed == [producer]
    assert task.producer is producers.started[0]  # its InitProducerId aborts what is open


async def test_a_failed_transaction_is_counted_by_reason() -> None:
    committer, task, producer, *_ = setup()
    producer.offsets_error = KafkaTimeoutError("no answer")
    labels = {"partition": "3", "reason": "error"}
    before = REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) or 0.0
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED and result.reason == "error"
    assert REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) == before + 1


async def test_a_lost_commit_answer_that_committed_is_committed_never_aborted() -> None:
    committer, task, producer, producers, broker, _ = setup(committed={SOURCE: 12})
    producer.commit_hangs = True
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert "abort" not in producer.calls
    assert producers.closed == [producer] and task.producer is producers.started[0]
    assert broker.asked == [[SOURCE]]


async def test_a_lost_commit_answer_that_did_not_commit_fails_never_aborted() -> None:
    committer, task, producer, producers, _, _ = setup(committed={SOURCE: 10})
    producer.commit_error = KafkaConnectionError("connection lost")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert "did not commit" in result.why
    assert "abort" not in producer.calls
    assert task.producer is producers.started[0]


async def test_fenced_at_the_commit() -> None:
    committer, task, producer, producers, broker, _ = setup()
    producer.commit_error = ProducerFenced()
    result = await committer.commit(task)
    assert result.outcome is Outcome.FENCED
    assert broker.asked == [] and producers.started == [] and "abort" not in producer.calls


async def test_an_abort_that_fails_replaces_the_producer() -> None:
    committer, task, producer, producers, *_ = setup(records=0)
    producer.abort_error = KafkaConnectionError("broker gone")
    assert (await committer.commit(task)).outcome is Outcome.ABORTED
    assert producers.closed == [producer] and task.producer is producers.started[0]


async def test_an_abort_that_meets_fencing_is_fenced() -> None:
    committer, task, producer, producers, *_ = setup(records=0)
    producer.abort_error = ProducerFenced()
    assert (await committer.commit(task)).outcome is Outcome.FENCED
    assert producers.started == []


async def test_a_stop_while_the_commit_request_is_out_propagates() -> None:
    """The manager marks the task failed and applies nothing (the outcome is unknown)."""
    committer, task, producer, *_ = setup()
    committer.timeout = 10.0
    producer.commit_hangs = True
    commit = asyncio.ensure_future(committer.commit(task))
    await producer.asked_to_commit.wait()
    commit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await commit
    assert "abort" not in producer.calls


@pytest.mark.parametrize("codec", ["none", "zstd", "lz4", "snappy", "gzip"])
def test_a_changelog_batch_is_a_transactional_batch_of_the_changelog_codec(codec: str) -> None:
    from aiokafka.record.default_records import DefaultRecordBatch

    from app.eos.producer import CODECS, TransactionalProducers
    from app.settings import Settings

    settings = Settings.from_env({"DEDUPE_CHANGELOG_COMPRESSION": codec})
    batch = TransactionalProducers(settings, lambda: False).changelog_batch()
    for i in range(200):
        assert batch.append(timestamp=None, key=b"id-%d" % i, value=b"entry" * 4, headers=[])
    batch.close()
    built = DefaultRecordBatch(bytes(batch._build()))  # what send_batch hands to the broker
    assert built.compression_type == CODECS[codec]
    assert built.is_transactional
    assert [r.key for r in built] == [b"id-%d" % i for i in range(200)]


class _Sender:
    """aiokafka's ``Sender`` as far as closing goes: cancelled, its routine awaits its request in
    flight (``Sender._sender_routine``), and ``close()`` cancels it and awaits it."""

    def __init__(self, in_flight: asyncio.Task[None]) -> None:
        self.in_flight = in_flight
        self.sender_task = asyncio.create_task(self._routine())

    async def _routine(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            await self.in_flight

    async def close(self) -> None:
        self.sender_task.cancel()
        await self.sender_task


def test_force_close_ends_with_an_abort_in_flight_waiting_for_a_held_batch() -> None:
    """A broker paused while an abort was in flight: the abort waits for the transaction's
    batch to be sent (aiokafka's ``flush_for_commit``), which only the sender does, and the
    cancelled sender waits for the abort. The wait for the sender is bounded; then the held
    batch is failed and both end (before: force_close awaited the sender and never returned)."""

    from aiokafka.cluster import ClusterMetadata
    from aiokafka.producer.message_accumulator import MessageAccumulator

    from app.eos import producer as producers

    async def scenario() -> None:
        acc = MessageAccumulator(ClusterMetadata(), 16384, 0, 30)
        delivered = await acc.add_message(TopicPartition("out", 0), b"k", b"v", timeout=1)
        abort = asyncio.create_task(acc.flush_for_commit())
        await asyncio.sleep(0)
        sender = _Sender(abort)
        closed: list[bool] = []

        async def close_client() -> None:
            closed.append(True)

        producer = SimpleNamespace(
            _sender=sender,
            _message_accumulator=acc,
            client=SimpleNamespace(close=close_client),
        )
        close = producers.force_close(producer, 0.5)  # type: ignore[arg-type]
        await asyncio.wait_for(close, timeout=5)
        # The held batch failed, the abort and then the sender end (on their own).
        await asyncio.wait({sender.sender_task}, timeout=1)
        assert sender.sender_task.done() and abort.done() and closed == [True]
        assert delivered.done() and isinstance(delivered.exception(), KafkaConnectionError)

    asyncio.run(scenario())
