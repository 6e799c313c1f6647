"""A task: partition number ``p`` of the co-partitioned source topics (the input topic and the
repartition topic; the table's changelog has the same partition count), with its producer,
its open transaction's records (:class:`~app.eos.collector.RecordCollector`) and offsets, and
where each source partition's next record must be."""

from __future__ import annotations

import asyncio
import enum
from dataclasses import dataclass, field

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.eos.collector import RecordCollector


class TaskState(enum.Enum):
    """Life of a partition task between two rebalances."""

    RUNNING = "running"
    #: Another owner initialised our transactional id: this worker must not touch ``p``.
    FENCED = "fenced"
    #: A transaction failed; ``p`` must be re-read from its committed offset after a rejoin.
    FAILED = "failed"


@dataclass
class Task:
    """The transactional state of one partition number ``p`` of the source topics."""

    partition: int
    transactional_id: str
    producer: AIOKafkaProducer | None = None
    state: TaskState = TaskState.RUNNING
    #: Held by a batch's processing scope and by the commit: they exclude each other, so a
    #: commit never contains half of a record.
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_transaction: bool = False
    collector: RecordCollector = field(default_factory=RecordCollector)
    #: Next offset to commit, per source partition, for records in the open transaction.
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    records: int = 0
    #: Next offset to read, per source partition: the last processed record's offset + 1.
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    #: When the consumer last delivered a record of each source partition (monotonic time).
    delivered_at: dict[TopicPartition, float] = field(default_factory=dict)
    #: Source partitions sought back by the stall watchdog since their last delivery.
    stall_seeks: set[TopicPartition] = field(default_factory=set)
    #: Offsets the broker held past each source partition's last delivered batch, as the fetch
    #: that brought it reported them (its last stable offset less the next offset to read).
    lag: dict[TopicPartition, int] = field(default_factory=dict)
    # figures for status and metrics
    #: Batches the consumer handed over for this task that completed.
    batches: int = 0
    commits: int = 0
    committed_records: int = 0
    last_commit_at: float | None = None
    last_commit_seconds: float | None = None

    @property
    def dirty(self) -> bool:
        """True when the open transaction holds processed records."""
        return bool(self.offsets)

    @property
    def caught_up(self) -> bool:
        """True when no source partition's last fetch left records at the broker. One offset
        may remain: the commit marker an upstream transactional producer's last transaction
        wrote after its records."""
        return all(n <= 1 for n in self.lag.values())

    def reset_transaction(self) -> None:
        """Forget the open transaction (committed, aborted or given up)."""
        self.collector.reset()
        self.in_transaction = False
        self.offsets.clear()
        self.records = 0
