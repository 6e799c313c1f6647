"""The dedup loop: ``dedupe_batch``, a thin loop over ``Deduplicator.handle`` for batches of one
partition's records handed over by ``app.eos.Consumer``; and the ``dedupe_events`` agent, which
only subscribes the source topics (no record reaches it).

Every decision comes from ``app.rules``; every send and table write happens inside the
record's task transaction (``app.eos``), so the record's output, dead-letter or repartition
record, its changelog record and its offset commit together or not at all.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence

import faust

from app import faults, rules
from app.eos import BatchHandler, SourceRecord, TaskTransaction, TaskTransactionManager
from app.settings import Settings
from tables.seen_ids import SeenIds

log = logging.getLogger(__name__)


class Outcome:
    """Names of the per-partition counters (what happened to each record)."""

    FORWARDED = "forwarded"
    DUPLICATE = "duplicates_dropped"
    DEAD_LETTERED = "dead_lettered"
    REKEYED = "rekeyed"


def record_ms(record: SourceRecord) -> int | None:
    """The Kafka timestamp of aiokafka's record (ms, -1: none); None when it has none."""
    return record.timestamp if record.timestamp >= 0 else None


class Deduplicator:
    """Handles one record inside its transaction. Counters are per partition, this process."""

    def __init__(self, settings: Settings, seen_ids: SeenIds) -> None:
        self.settings = settings
        self.seen_ids = seen_ids
        self.counts: dict[int, Counter[str]] = {}
        self.max_future_ms = round(settings.max_future_skew * 1000)
        self.faults = faults.parse(settings.fault_injection)

    async def handle(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        timestamp_ms: int | None,
        key_partition: int | None = None,
    ) -> str:
        """Decide ``message`` and send what it becomes. ``timestamp_ms`` is its Kafka timestamp
        (None: it has none; see :func:`record_ms`); ``key_partition`` is
        the partition its key hashes to, when the caller computed it for a whole batch."""
        s = self.settings
        value: bytes | None = message.value
        headers: Sequence[tuple[str, bytes]] = message.headers or ()
        checked = rules.inspect(
            value, max_event_bytes=s.max_event_bytes, max_id_bytes=s.max_message_id_bytes
        )
        if isinstance(checked, rules.Invalid):
            await txn.send(
                s.dlq_topic,
                key=message.key,
                value=value,
                headers=rules.dead_letter_headers(
                    list(headers), checked, message.topic, message.partition, message.offset
                ),
                timestamp_ms=timestamp_ms,
                partition=message.partition,
            )
            return Outcome.DEAD_LETTERED
        if message.topic == s.input_topic and rules.needs_rekey(
            message.key, message.partition, checked, s.partitions, key_partition
        ):
            await txn.send(
                s.repartition_topic,
                key=checked.id_bytes,
                value=value,
                headers=headers,
                timestamp_ms=timestamp_ms,
                partition=rules.partition_for(checked.id_bytes, s.partitions),
            )
            return Outcome.REKEYED
        kafka_ms = rules.clamp_ms(timestamp_ms or 0)
        record_ms = (
            kafka_ms
            if s.time_source == "kafka"
            else rules.event_time_ms(checked.event_timestamp, kafka_ms, self.max_future_ms)
        )
        # The tables are co-partitioned with the record: its partition is theirs.
        first = self.seen_ids.first_sighting(checked.id_bytes, record_ms, message.partition)
        self.seen_ids.age_out(record_ms, message.partition)
        if not first:
            return Outcome.DUPLICATE
        if self.faults is not None:
            self.faults.reach("stored")
        await txn.send(
            s.output_topic,
            key=checked.id_bytes,
            value=value,
            headers=headers,
            timestamp_ms=timestamp_ms,
            partition=message.partition,
        )
        if self.faults is not None:
            self.faults.reach("sent")
        return Outcome.FORWARDED

    def count(self, partition: int, outcome: str, n: int = 1) -> None:
        counter = self.counts.get(partition)
        if counter is None:
            counter = self.counts[partition] = Counter()
        counter[outcome] += n


def register_agents(app: faust.App, source: faust.TopicT) -> faust.types.AgentT:
    """Declare ``dedupe_events`` on ``app``: it subscribes the source topics for Faust's consumer.

    No record reaches it: ``app.eos.Consumer`` hands every source record to ``dedupe_batch``
    inside its task's transaction. One that did would be outside any transaction, so it stops
    the worker instead of being processed.
    """

    async def dedupe_events(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            message = event.message
            raise RuntimeError(
                f"record {message.topic}-{message.partition}@{message.offset} reached the "
                "dedupe_events agent, outside any transaction: the consumer must hand source "
                "records to dedupe_batch"
            )

    agent: faust.types.AgentT = app.agent(source, name="dedupe_events", concurrency=1)(
        dedupe_events
    )
    return agent


def batch_handler(app: faust.App, dedup: Deduplicator) -> BatchHandler:
    """``dedupe_batch``: handles a batch of one partition's records handed over by
    ``app.eos.Consumer`` (without Faust's per-record stream machinery) in its task's
    transaction. Counts apply once the batch's records are in the transaction."""

    partitions = dedup.settings.partitions

    async def dedupe_batch(messages: list[SourceRecord], generation_id: int) -> None:
        transactions: TaskTransactionManager = app.consumer.transactions
        outcomes: Counter[str] = Counter()
        async with transactions.processing_batch(messages, generation_id) as batch:
            if batch is None:
                return  # not our partition any more: its owner processes it
            # Where each key belongs, for the whole batch at once (the placement check).
            keys = [m.key or b"" for m in messages]
            homes = rules.partitions_for(keys, partitions)
            # The ids are the keys (records are keyed by messageId): one multi-get for the
            # batch's lookups; a record whose id is not its key is looked up on its own.
            dedup.seen_ids.prefetch(batch.partition, keys)
            home_of = {m.offset: home for m, home in zip(messages, homes, strict=True)}
            async for message in batch.records():
                outcome = await dedup.handle(
                    batch, message, record_ms(message), home_of[message.offset]
                )
                outcomes[outcome] += 1
        for outcome, n in outcomes.items():
            dedup.count(messages[0].partition, outcome, n)

    return dedupe_batch
