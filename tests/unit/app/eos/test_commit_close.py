"""Around the commit protocol (``app.eos.commit``): the changelog's batch is a transactional
batch of the changelog codec, and a force close ends with an abort while a batch is held."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
from aiokafka.errors import KafkaConnectionError
from aiokafka.structs import TopicPartition

from adapters.built_batches import is_native


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
    assert is_native(batch) is (codec in ("none", "zstd"))  # the codecs it builds natively


@pytest.mark.parametrize(("native_records", "native"), [("auto", True), ("off", False)])
def test_the_tasks_output_batches_are_built_as_dedupe_native_records_says(
    native_records: str, native: bool
) -> None:
    from app.eos.producer import TransactionalProducers
    from app.settings import Settings

    settings = Settings.from_env({"DEDUPE_NATIVE_RECORDS": native_records})
    producers = TransactionalProducers(settings, lambda: False)
    collector = producers.collector()
    tp = TopicPartition(settings.output_topic, 0)
    assert collector.append_now(None, tp, b"k", b"v", 1, None)  # type: ignore[arg-type]
    assert is_native(collector.open_batches()[tp]) is native
    assert is_native(producers.changelog_batch()) is native


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
