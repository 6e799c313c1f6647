"""The record batches the worker's producers send (clean, dead-letter and changelog topics),
built by the native module (``dedupe_native.BatchBuilder``, ``native/src/batch_builder.rs``)
instead of aiokafka's ``BatchBuilder``, which encodes each record in Python.

aiokafka's producer takes a built batch through ``send_batch(builder, topic, partition)``; its
``MessageBatch`` then calls the builder's ``record_count``, ``closed``, ``close``, and, when the
sender drains the batch into a Produce request, ``_set_producer_state`` and ``_build``
(``MESSAGE_BATCH_PINNED_SOURCES`` pins that code). The native builder answers those as
aiokafka's does, and ``append`` as aiokafka's (True where aiokafka's gives a record's metadata,
which nothing here reads; None when the record does not fit). An uncompressed batch is the same
bytes as aiokafka's builder writes for the same records; a zstd one holds the same records
(``tests/unit/adapters/test_built_batches.py``, a hypothesis property over both). Other codecs
keep aiokafka's builder, and so does every batch with ``DEDUPE_NATIVE_RECORDS=off`` or without
the extension: aiokafka's stays the reference and the fallback.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from aiokafka.producer.message_accumulator import BatchBuilder, MessageAccumulator, MessageBatch

#: The codecs the native builder writes (aiokafka's ``DefaultRecordBatch`` codes: none, zstd).
NATIVE_CODECS = frozenset({0, 4})

#: The aiokafka code the native builder stands in for, with the sha256 (first 16 hex digits) of
#: each source when it was read: what the batch calls on its builder, and the builder itself.
MESSAGE_BATCH_PINNED_SOURCES: list[tuple[type, str, str, str]] = [
    (MessageBatch, "set_producer_state", "calls _set_producer_state", "a8fbdf3deb1e3030"),
    (MessageBatch, "get_data_buffer", "calls _build", "8ccecb7995ab2e17"),
    (MessageBatch, "is_empty", "calls record_count", "0cc44a30be03d3c4"),
    (MessageBatch, "remaining_linger", "calls closed", "0c6613bcf16d3d03"),
    (MessageAccumulator, "flush_for_commit", "calls close", "c1deaeb33046be5c"),
    (BatchBuilder, "append", "the append it answers as", "65992902ef83c7cb"),
    (BatchBuilder, "_build", "the build it answers as", "2ac3562b09c12335"),
]


def batch_maker(
    native: ModuleType | None, batch_size: int, codec: int, *, transactional: bool = True
) -> Callable[[], Any]:
    """What makes an empty batch of ``batch_size`` bytes compressed with ``codec``: the native
    builder when ``native`` (the loaded extension, None: not used) writes that codec, else
    aiokafka's."""
    if native is not None and codec in NATIVE_CODECS:
        native_builder = native.BatchBuilder

        def make_native() -> Any:
            return native_builder(batch_size, codec, is_transactional=transactional)

        return make_native

    def make_aiokafka() -> Any:
        return BatchBuilder(batch_size, codec, is_transactional=transactional)

    return make_aiokafka


def is_native(batch: Any) -> bool:
    """True for a batch the native builder makes (the tests ask)."""
    return type(batch).__module__ == "dedupe_native"


def append_pairs(batch: Any, records: list[tuple[bytes, bytes | None]], start: int = 0) -> int:
    """Append ``records[start:]``, ``(key, value)`` pairs without headers and with the time of
    now, to ``batch`` until it refuses one: the index of the first record not appended
    (``len(records)``: all were). The native builder takes them in one call (``extend``);
    aiokafka's, one ``append`` each."""
    if is_native(batch):
        appended: int = batch.extend(records, start)
        return appended
    append = batch.append
    for i in range(start, len(records)):
        key, value = records[i]
        if append(timestamp=None, key=key, value=value, headers=[]) is None:
            return i
    return len(records)


#: A record as :func:`append_records` takes it: ``(timestamp_ms, key, value, headers)``; the
#: time None for now, the headers ``(str, bytes)`` pairs or None.
Record = tuple[int | None, bytes | None, bytes | None, Sequence[tuple[str, bytes]] | None]


def append_records(batch: Any, records: list[Record], start: int = 0) -> int:
    """Append ``records[start:]`` to ``batch``, as one ``append`` each would, until it refuses
    one: the index of the first record not appended (``len(records)``: all were). The native
    builder takes them in one call (``extend_records``); aiokafka's, one ``append`` each."""
    if is_native(batch):
        appended: int = batch.extend_records(records, start)
        return appended
    append = batch.append
    for i in range(start, len(records)):
        timestamp, key, value, headers = records[i]
        listed = list(headers) if headers else []  # aiokafka's builder takes a list only
        if append(timestamp=timestamp, key=key, value=value, headers=listed) is None:
            return i
    return len(records)
