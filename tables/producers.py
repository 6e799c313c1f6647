"""``producer_seqs``: the highest forwarded sequence of each producer (the producer-sequence
strategy, ``app/strategy.py``), with idle and size-cap age-out.

The table (replicated through its changelog, inside each partition's transaction):

- Key: the producer name (header ``dedupe.producer``), UTF-8, at most 255 bytes.
- Value: 16 bytes: the highest forwarded sequence, then the record time (ms) of the producer's
  last record, forwarded or repeat (both unsigned 64-bit, big-endian).
- Partitioning: co-partitioned with the input by producer name (Kafka's murmur2), so every
  record of a producer meets the same state; a record placed elsewhere is re-keyed through the
  repartition topic first.
- Changelog: ``<app id>-producer_seqs-changelog``, compacted; a producer that ages out is deleted
  with a tombstone in the same transaction.

Retention (how long a producer's sequence is remembered), by record times only, so a replay
decides as the first run did:

- **Idle** ``DEDUPE_PRODUCER_IDLE`` (6 h): a producer with no record for that long, measured
  against the newest record time of its partition's producers, is forgotten; its next record is
  forwarded whatever its sequence.
- **Size cap** ``DEDUPE_MAX_PRODUCERS_PER_PARTITION`` (10,000): past it the least recently
  active producer goes first.

A repeat is a record at or below the highest forwarded sequence; gaps are allowed. The live set
of producers of a partition (name -> last record time, at most the cap) is kept in memory,
loaded from the committed database on first use and dropped when a transaction aborts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

import faust

from tables.protocol import changelog_topic
from tables.rocks_options import RocksTuning
from tables.store import TransactionalStore
from tables.transactional import TransactionalTable

log = logging.getLogger(__name__)

TABLE_NAME = "producer_seqs"


class ProducerSeqsSettings(Protocol):
    """The settings ``producer_seqs`` reads (``app.settings.Settings`` documents them)."""

    @property
    def app_id(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def producer_idle(self) -> float: ...
    @property
    def max_producers_per_partition(self) -> int: ...


def changelog_topic_name(settings: ProducerSeqsSettings) -> str:
    return changelog_topic(settings.app_id, TABLE_NAME)


@dataclass(frozen=True, slots=True)
class ProducerState:
    last_sequence: int
    active_ms: int

    def encode(self) -> bytes:
        return self.last_sequence.to_bytes(8, "big") + self.active_ms.to_bytes(8, "big")

    @classmethod
    def decode(cls, value: bytes) -> ProducerState:
        return cls(int.from_bytes(value[:8], "big"), int.from_bytes(value[8:16], "big"))


def is_repeat(held: ProducerState | None, sequence: int) -> bool:
    """At or below the producer's highest forwarded sequence."""
    return held is not None and sequence <= held.last_sequence


def idle(active_ms: int, stream_ms: int, idle_ms: int) -> bool:
    """The producer's last record is at least ``idle_ms`` behind the partition's newest."""
    return stream_ms - active_ms >= idle_ms


class ProducerSeqs:
    """The decision and age-out over ``producer_seqs``, for the record being processed."""

    def __init__(self, table: TransactionalTable, settings: ProducerSeqsSettings) -> None:
        self.table = table
        self.idle_ms = round(settings.producer_idle * 1000)
        self.cap = settings.max_producers_per_partition
        #: partition -> producer -> last record time: committed state plus the open transaction.
        self._active: dict[int, dict[bytes, int]] = {}
        self._stream_ms: dict[int, int] = {}
        #: partition -> the record time at which the oldest producer may be idle (a lower bound).
        self._next_check: dict[int, int] = {}
        self.expired: dict[int, int] = {}
        self.evicted: dict[int, int] = {}

    @property
    def store(self) -> TransactionalStore:
        return self.table.store

    def _load(self, partition: int) -> dict[bytes, int]:
        loaded = self._active.get(partition)
        if loaded is not None:
            return loaded
        active: dict[bytes, int] = {}
        for key, value in self.store.db(partition).items():
            assert isinstance(key, bytes) and isinstance(value, bytes)
            active[key] = ProducerState.decode(value).active_ms
        self._active[partition] = active
        self._stream_ms[partition] = max(active.values(), default=0)
        self._next_check[partition] = min(active.values(), default=0) + self.idle_ms
        return active

    def advance(self, producer: bytes, sequence: int, record_ms: int, partition: int) -> bool:
        """True (and ``sequence`` becomes the producer's highest) unless the record is a
        repeat; either way the producer was active at ``record_ms``."""
        active = self._load(partition)
        raw = self.table.lookup(producer, partition)
        held = None if raw is None else ProducerState.decode(raw)
        repeat = is_repeat(held, sequence)
        active_ms = record_ms if held is None else max(held.active_ms, record_ms)
        last = held.last_sequence if repeat and held is not None else sequence
        self.table.put(producer, ProducerState(last, active_ms).encode(), partition)
        active[producer] = active_ms
        if active_ms > self._stream_ms.get(partition, 0):
            self._stream_ms[partition] = active_ms
        self._age_out(partition, active, producer)
        return not repeat

    def _age_out(self, partition: int, active: dict[bytes, int], current: bytes) -> None:
        stream_ms = self._stream_ms[partition]
        while len(active) > self.cap:
            oldest = min((p for p in active if p != current), key=active.__getitem__)
            self._forget(partition, active, oldest, self.evicted)
        if stream_ms < self._next_check.get(partition, 0):
            return
        for name, active_ms in list(active.items()):
            if name != current and idle(active_ms, stream_ms, self.idle_ms):
                self._forget(partition, active, name, self.expired)
        self._next_check[partition] = min(active.values(), default=stream_ms) + self.idle_ms

    def _forget(
        self, partition: int, active: dict[bytes, int], name: bytes, counter: dict[int, int]
    ) -> None:
        del active[name]
        self.table.put(name, None, partition)
        counter[partition] = counter.get(partition, 0) + 1

    def held(self, partition: int) -> int:
        return len(self._active.get(partition, ()))

    def committed(self, partition: int, producer: bytes) -> ProducerState | None:
        """What the committed state holds for a producer (what read_committed readers see)."""
        raw = self.store.db(partition).get(producer)
        return None if raw is None else ProducerState.decode(raw)

    def status(self, partition: int) -> dict[str, int]:
        return {
            "producers_held": self.held(partition),
            "producers_expired": self.expired.get(partition, 0),
            "producers_evicted": self.evicted.get(partition, 0),
        }

    # -- transaction outcome (registered with the transaction manager after the store) ----------

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        """The in-memory set already holds the transaction's changes."""

    def discard_partition(self, partition: int) -> None:
        """The transaction aborted: reload the set from the committed database on next use."""
        self._active.pop(partition, None)
        self._stream_ms.pop(partition, None)
        self._next_check.pop(partition, None)


def declare_producer_seqs(
    app: faust.App, settings: ProducerSeqsSettings, tuning: RocksTuning
) -> TransactionalTable:
    """Declare the table on ``app`` (one per app)."""
    table = TransactionalTable(
        app,
        name=TABLE_NAME,
        partitions=settings.partitions,
        beacon=app.tables.beacon,
        store_factory=lambda *a, **kw: TransactionalStore(*a, tuning=tuning, **kw),
        help="producer name -> highest forwarded sequence and last record time",
    )
    app.tables.add(table)
    return table
