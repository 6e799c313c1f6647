"""The records of a task's open transaction: one batch being built per target partition, the
batches handed to the producer with their delivery futures, and the first send error.

``producer.send`` costs a future, a metadata check and an accumulator round per record; a
batch built here costs one append per record and one
``send_batch`` per partition per commit. Nothing reaches the producer before its batch is sent,
so a transaction that aborts never sent its open batches at all.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

from aiokafka import AIOKafkaProducer
from aiokafka.structs import RecordMetadata, TopicPartition

#: A record as the batch's append function takes it (``adapters/built_batches.py``).
T = TypeVar("T")

#: Records per partition go to the broker in batches of up to this size; a commit interval's
#: records fit in a few.
MAX_BATCH_BYTES = 1024 * 1024

#: A batch handed to the producer: its delivery future (the batch's base offset) and the index
#: of its last record, so ``base + last`` is the last record's offset.
Sent = tuple["asyncio.Future[RecordMetadata]", int]


def retrieve_exception_later(fut: asyncio.Future[Any]) -> None:
    """Mark ``fut``'s outcome as seen: a given-up send or abort must not log "exception was
    never retrieved" (at ERROR) when it fails after we stopped waiting for it."""
    fut.add_done_callback(lambda f: None if f.cancelled() else f.exception())


class RecordCollector:
    """The open transaction's records of one task (see the module docstring)."""

    __slots__ = (
        "_builders",
        "builder_of",
        "changelog_batch",
        "changelog_pending",
        "changelog_tps",
        "output_batch",
        "pending",
    )

    def __init__(self, output_batch: Callable[[], Any] | None = None) -> None:
        """``output_batch``: makes the empty batches of every target but the changelogs
        (``TransactionalProducers.output_batch``); None: the producer's ``create_batch``."""
        #: Makes the empty batches of the output, dead-letter and repartition partitions.
        self.output_batch = output_batch
        #: Batches being built, per target partition. Keyed by ``TopicPartition``, which equals
        #: (and hashes as) a plain ``(topic, partition)`` tuple: the hot path looks up by tuple.
        self._builders: dict[TopicPartition, Any] = {}
        #: The open batch of a ``(topic, partition)``, or None: the per-record lookup of the
        #: send path (``batch.py``), a bound method of the collector's own dict, which it
        #: never replaces, so the lookup costs no more than the dict's own.
        self.builder_of: Callable[[tuple[str, int]], Any] = self._builders.get
        #: Batches the producer has (output, dead-letter, repartition).
        self.pending: list[Sent] = []
        #: Batches of changelog records handed to the producer, per changelog topic.
        self.changelog_pending: dict[str, list[Sent]] = {}
        #: The changelog partitions among the targets.
        self.changelog_tps: set[TopicPartition] = set()
        #: Makes the empty batches of changelog partitions (their own compression); None: as
        #: every other target's.
        self.changelog_batch: Callable[[], Any] | None = None

    def open_batches(self) -> dict[TopicPartition, Any]:
        """The batches being built, per target partition (a copy)."""
        return dict(self._builders)

    def add_changelog_target(self, tp: TopicPartition, make_batch: Callable[[], Any]) -> None:
        """``tp`` is a changelog partition: its batches are made by ``make_batch`` (their own
        compression) and their sends counted per changelog topic."""
        self.changelog_batch = make_batch
        self.changelog_tps.add(tp)

    def _new_batch(self, producer: AIOKafkaProducer, tp: TopicPartition) -> Any:
        if self.changelog_batch is not None and tp in self.changelog_tps:
            return self.changelog_batch()
        if self.output_batch is None:
            return producer.create_batch()
        return self.output_batch()

    def append_now(
        self,
        producer: AIOKafkaProducer,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> bool:
        """Add a record to the open batch for ``tp``; False (nothing added) when that batch is
        full and must be sent first (:meth:`append`)."""
        builder = self._builders.get(tp)
        if builder is None:
            builder = self._builders[tp] = self._new_batch(producer, tp)
        return (
            builder.append(timestamp=timestamp_ms, key=key, value=value, headers=headers or [])
            is not None
        )

    async def extend(
        self,
        producer: AIOKafkaProducer,
        tp: TopicPartition,
        records: list[T],
        append: Callable[[Any, list[T], int], int],
        start: int = 0,
    ) -> None:
        """Add ``records[start:]`` to the open batch for ``tp`` in one call per batch
        (``append``: ``built_batches.append_pairs`` for ``(key, value)`` pairs without headers
        at the time of now, a commit's changelog records; ``built_batches.append_records`` for
        whole records); a full batch goes to the producer."""
        end = len(records)
        while start < end:
            builder = self._builders.get(tp)
            if builder is None:
                builder = self._builders[tp] = self._new_batch(producer, tp)
            start = append(builder, records, start)
            if start < end:
                # Full. The next, empty batch takes at least its first record.
                await self.send_batch(producer, tp)

    async def append(
        self,
        producer: AIOKafkaProducer,
        tp: TopicPartition,
        key: bytes | None,
        value: bytes | None,
        timestamp_ms: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Add a record to the open batch for ``tp``; a full batch goes to the producer."""
        if self.append_now(producer, tp, key, value, timestamp_ms, headers):
            return
        await self.send_batch(producer, tp)  # full
        builder = self._builders[tp] = self._new_batch(producer, tp)
        # An empty batch takes any record (the broker judges its size).
        builder.append(timestamp=timestamp_ms, key=key, value=value, headers=headers or [])

    async def send_batch(self, producer: AIOKafkaProducer, tp: TopicPartition) -> None:
        """Hand the open batch for ``tp`` to the producer (it joins the open transaction)."""
        builder = self._builders.pop(tp)
        builder.close()  # complete: ``producer.send`` must not add to it
        fut = await producer.send_batch(builder, tp.topic, partition=tp.partition)
        last = builder.record_count() - 1
        if tp in self.changelog_tps:
            self.changelog_pending.setdefault(tp.topic, []).append((fut, last))
        else:
            self.pending.append((fut, last))

    async def send_all(self, producer: AIOKafkaProducer) -> None:
        """Hand every open batch to the producer (before the commit)."""
        for tp in list(self._builders):
            await self.send_batch(producer, tp)

    async def delivered(self) -> None:
        """Raise the first send error, once every send is answered (after the producer was
        flushed every one normally is)."""
        futures = [f for f, _ in self._sent()]
        unanswered = [f for f in futures if not f.done()]
        if unanswered:
            await asyncio.gather(*unanswered)
        for f in futures:
            exc = f.exception()
            if exc is not None:
                raise exc

    def changelog_offsets(self) -> dict[str, int]:
        """Offset of the transaction's last record per changelog topic (after
        :meth:`delivered`)."""
        return {
            topic: max(f.result().offset + last for f, last in sent)
            for topic, sent in self.changelog_pending.items()
            if sent
        }

    def _sent(self) -> list[Sent]:
        return [*self.pending, *(s for sent in self.changelog_pending.values() for s in sent)]

    def reset(self) -> None:
        """Forget the transaction's records. Sends of a transaction given up fail later
        (aborted, fenced); nobody awaits them."""
        for fut, _ in self._sent():
            retrieve_exception_later(fut)
        self._builders.clear()
        self.pending.clear()
        self.changelog_pending.clear()
