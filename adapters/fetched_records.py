"""The source partitions' fetched records decoded by the native module (``native/``, the
``dedupe_native`` extension) in one call per fetched partition, instead of aiokafka's loop that
builds a ``DefaultRecord`` and then a ``ConsumerRecord`` per record in Python.

aiokafka's fetcher turns each partition of a fetch response into ``MemoryRecords(bytes)`` and
then ``PartitionRecords(tp, records, aborted_transactions, fetch_offset, ...)``, whose
``_unpack_records`` generator yields the records and moves ``next_fetch_offset``
(aiokafka/consumer/fetcher.py). :func:`install` puts two classes in that module's place:

- :class:`KeptRecords`, aiokafka's ``MemoryRecords`` that also keeps the fetched bytes;
- :class:`NativePartitionRecords`, aiokafka's ``PartitionRecords`` whose ``_unpack_records``
  hands the bytes of a source topic's partition to ``dedupe_native.unpack``, then yields its
  records and moves ``next_fetch_offset`` exactly as aiokafka's loop does at every record it
  yields and at the end. Where aiokafka would raise (bad CRC, corrupt batch, codec error) or meets
  a record format older than v2, ``unpack`` answers None and aiokafka's own loop runs over the same
  bytes: same records, then the same error. ``unpack`` checks every batch's CRC, whatever the
  consumer's ``check_crcs``: a corrupt compressed batch must never reach its codecs, which need
  not refuse the same bytes aiokafka's refuse. Other topics' partitions, or a consumer with
  deserializers, always take aiokafka's loop.

The native record (``dedupe_native.Record``) has the attributes of aiokafka's ``ConsumerRecord``,
read-only. ``tests/unit/adapters/test_fetched_records.py`` holds both loops to the same records,
positions and errors (hypothesis over batches aiokafka's own builder writes, every codec, aborted
transactions and control batches); ``FETCHER_PINNED_SOURCES`` pins the aiokafka code this relies
on. The pure-Python path (aiokafka's) stays the fallback: ``DEDUPE_NATIVE_RECORDS``.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Iterator
from types import ModuleType
from typing import Any

from aiokafka.consumer import fetcher
from aiokafka.consumer.fetcher import READ_COMMITTED, Fetcher, PartitionRecords
from aiokafka.record.memory_records import MemoryRecords

#: The aiokafka code this module relies on, with the sha256 (first 16 hex digits) of each source
#: when it was read: the fetcher builds ``MemoryRecords`` and ``PartitionRecords`` by these module
#: names; the loop replaced, its record and its constructor's fields.
FETCHER_PINNED_SOURCES: list[tuple[type, str, str, str]] = [
    (Fetcher, "_proc_fetch_request", "builds both by module name", "ace04969424fc674"),
    (PartitionRecords, "__init__", "the fields read", "4649d3084e5956ef"),
    (PartitionRecords, "_unpack_records", "the loop replaced", "047f7fc3f005c220"),
    (PartitionRecords, "_consumer_record", "the record's fields", "56c3ee13f914a9d2"),
]


class KeptRecords:
    """aiokafka's ``MemoryRecords`` over a fetched partition's bytes, which it keeps
    (``data``) for :class:`NativePartitionRecords`. Its compiled class can be neither
    subclassed nor asked for its buffer."""

    __slots__ = ("_records", "data")

    def __init__(self, bytes_data: bytes) -> None:
        self.data = bytes_data
        self._records = MemoryRecords(bytes_data)

    def size_in_bytes(self) -> int:
        return int(self._records.size_in_bytes())

    def has_next(self) -> bool:
        return bool(self._records.has_next())

    def next_batch(self) -> Any:
        return self._records.next_batch()


class NativePartitionRecords(PartitionRecords):  # type: ignore[misc]
    """aiokafka's ``PartitionRecords`` with its loop decoded natively for the topics given to
    :func:`install` (the class attributes below)."""

    next_fetch_offset: int
    #: ``dedupe_native`` once installed; None: aiokafka's loop for every partition.
    native: ModuleType | None = None
    #: The topics whose partitions are decoded natively (the worker's source topics).
    topics: frozenset[str] = frozenset()

    def _unpack_records(self) -> Iterator[Any]:
        native, tp, records = self.native, self._tp, self._records
        if (
            native is not None
            and tp.topic in self.topics
            and isinstance(records, KeptRecords)
            and type(records.data) is bytes
            and self._key_deserializer is None
            and self._value_deserializer is None
        ):
            decoded = native.unpack(
                records.data,
                tp.topic,
                tp.partition,
                self.next_fetch_offset,
                self._aborted_transactions,
                self._isolation_level == READ_COMMITTED,
            )
            if decoded is not None:
                fetched, next_fetch_offset = decoded
                for record in fetched:
                    self.next_fetch_offset = record.offset + 1
                    yield record
                self.next_fetch_offset = next_fetch_offset
                return
        yield from super()._unpack_records()


def load() -> ModuleType | None:
    """The native module, or None when it is not installed (``make install`` builds it)."""
    try:
        return importlib.import_module("dedupe_native")
    except ImportError:
        return None


def for_setting(native_records: str) -> ModuleType | None:
    """The native module as ``DEDUPE_NATIVE_RECORDS`` lets the worker use it, for the fetched
    records and for the batches it writes (``adapters/built_batches.py``) alike: None with
    ``off`` or when it is not installed."""
    return None if native_records == "off" else load()


def install(native: ModuleType, topics: Collection[str]) -> None:
    """Decode the partitions of ``topics`` with ``native`` in every consumer of this process
    from now on (the fetcher module's names are process-wide; other topics keep aiokafka's loop).
    """
    NativePartitionRecords.native = native
    NativePartitionRecords.topics = frozenset(topics)
    fetcher.MemoryRecords = KeptRecords
    fetcher.PartitionRecords = NativePartitionRecords


def uninstall() -> None:
    """aiokafka's own classes again (tests)."""
    fetcher.MemoryRecords = MemoryRecords
    fetcher.PartitionRecords = PartitionRecords
    NativePartitionRecords.native = None
    NativePartitionRecords.topics = frozenset()
