"""What a decided record becomes: the sends of ``app.worker.dedup`` into the record's task
transaction (the clean topic, the repartition topic or the dead-letter topic), and the names of the
outcomes they are counted under."""

from __future__ import annotations

from collections.abc import Sequence

from app import rules
from app.eos import SourceRecord, TaskTransaction
from app.settings import Settings


class RecordOutcome:
    """Names of the per-partition counters (what happened to each record)."""

    FORWARDED = "forwarded"
    DUPLICATE = "duplicates_dropped"
    DEAD_LETTERED = "dead_lettered"
    REKEYED = "rekeyed"
    #: DEDUPE_VERIFY_CONTENT: same id, other content (dead-lettered, counted on its own).
    REUSED = "messageId_reused"


class Sends:
    """Each send keeps the record's value and timestamp; the output and dead-letter records go
    to the input record's partition (the tables are co-partitioned with it), a re-keyed one to
    the partition its decision key hashes to."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    async def forward(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        key: bytes,
        headers: Sequence[tuple[str, bytes]],
        timestamp_ms: int | None,
    ) -> str:
        await txn.send(
            self.settings.output_topic,
            key=key,
            value=message.value,
            headers=headers,
            timestamp_ms=timestamp_ms,
            partition=message.partition,
        )
        return RecordOutcome.FORWARDED

    async def rekey(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        key: bytes,
        headers: Sequence[tuple[str, bytes]],
        timestamp_ms: int | None,
    ) -> str:
        s = self.settings
        await txn.send(
            s.repartition_topic,
            key=key,
            value=message.value,
            headers=headers,
            timestamp_ms=timestamp_ms,
            partition=rules.partition_for(key, s.partitions),
        )
        return RecordOutcome.REKEYED

    async def dead_letter(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        bad: rules.Invalid,
        timestamp_ms: int | None,
    ) -> str:
        await txn.send(
            self.settings.dlq_topic,
            key=message.key,
            value=message.value,
            headers=rules.dead_letter_headers(
                list(message.headers or ()), bad, message.topic, message.partition, message.offset
            ),
            timestamp_ms=timestamp_ms,
            partition=message.partition,
        )
        return RecordOutcome.DEAD_LETTERED
