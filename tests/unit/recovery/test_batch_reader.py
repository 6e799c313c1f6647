"""The restorer's reader (recovery/reader.py): which records of a fetch are committed.

The batches are real Kafka v2 record batches (aiokafka's builder, with the base offset and, for
markers, the control flag set as a broker sets them). The reader against a real broker, beside
aiokafka's read_committed consumer, is in tests/integration/test_batch_reader.py."""

from __future__ import annotations

import struct

import pytest
from aiokafka.errors import CorruptRecordException
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords
from aiokafka.record.util import calc_crc32c
from aiokafka.structs import TopicPartition

from recovery.reader import unpack

TP = TopicPartition("app-seen_ids-changelog", 0)
CONTROL = 0x20
COMMIT, ABORT = 1, 0


def batch(
    base: int,
    keys: list[str],
    *,
    producer: int = 7,
    transactional: bool = True,
    marker: int | None = None,
) -> bytes:
    """A record batch at offset ``base``: a record per key (value ``v-<key>``), or a control
    batch holding one commit or abort marker."""
    builder = DefaultRecordBatchBuilder(2, 0, int(transactional), producer, 0, 0, 1 << 20)
    if marker is None:
        for i, key in enumerate(keys):
            builder.append(i, 1000, key.encode(), f"v-{key}".encode(), [])
    else:
        builder.append(0, 1000, struct.pack(">hh", 0, marker), b"", [])
    raw = bytearray(builder.build())
    struct.pack_into(">q", raw, 0, base)
    if marker is not None:
        attributes = struct.unpack_from(">h", raw, 21)[0] | CONTROL
        struct.pack_into(">h", raw, 21, attributes)
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    return bytes(raw)


def read(
    *batches: bytes, aborted: list[tuple[int, int]] | None = None, offset: int = 0, end: int = 99
) -> tuple[list[str], list[tuple[int, int]], int]:
    found = unpack(MemoryRecords(b"".join(batches)), aborted or [], TP, offset, end)
    keys = [k.decode() for k, _ in found.records]
    assert [v for _, v in found.records] == [f"v-{k}".encode() for k in keys]
    return keys, found.cuts, found.next_offset


def test_committed_batches_come_back_in_order_with_a_cut_after_each() -> None:
    keys, cuts, next_offset = read(
        batch(0, ["a", "b"]), batch(2, ["c"]), batch(3, [], marker=COMMIT)
    )
    assert keys == ["a", "b", "c"]
    assert cuts == [(2, 1), (3, 2)]
    assert next_offset == 4  # past the commit marker, which is no record


def test_an_aborted_transaction_is_skipped_up_to_its_abort_marker() -> None:
    keys, _, next_offset = read(
        batch(0, ["a"]),
        batch(1, [], marker=COMMIT),
        batch(2, ["x", "y"]),  # aborted
        batch(4, ["p"], producer=8),  # another producer's, committed
        batch(5, ["z"]),  # aborted too
        batch(6, [], marker=ABORT),
        batch(7, [], producer=8, marker=COMMIT),
        batch(8, ["b"]),  # producer 7's next transaction
        batch(9, [], marker=COMMIT),
        aborted=[(7, 2)],
    )
    assert keys == ["a", "p", "b"]
    assert next_offset == 10


def test_a_non_transactional_batch_is_read() -> None:
    keys, _, _ = read(batch(0, ["a", "b"], producer=-1, transactional=False))
    assert keys == ["a", "b"]


def test_records_before_the_fetch_offset_and_from_the_end_on_are_left_out() -> None:
    keys, cuts, next_offset = read(batch(0, ["a", "b", "c"]), batch(3, ["d", "e"]), offset=1, end=4)
    assert keys == ["b", "c", "d"]
    assert cuts == [(2, 2), (3, 3)]
    assert next_offset == 5


def test_a_batch_whose_checksum_does_not_match_raises() -> None:
    raw = bytearray(batch(0, ["a"]))
    raw[-1] ^= 0xFF
    with pytest.raises(CorruptRecordException, match="checksum"):
        read(bytes(raw))


def test_nothing_fetched_leaves_the_offset_where_it_was() -> None:
    keys, cuts, next_offset = read(offset=5)
    assert (keys, cuts, next_offset) == ([], [], 5)


def test_a_compacted_batch_is_read_through_its_last_offset() -> None:
    """Compaction removed the last records of a batch, and the batch kept its last offset: a
    whole batch read is held through that offset, and a batch read from inside (the fetch
    offset within it) through its last record read."""
    raw = bytearray(batch(10, ["a", "b"]))  # records at 10 and 11
    struct.pack_into(">i", raw, 23, 4)  # last offset delta: the batch ran to offset 14
    struct.pack_into(">I", raw, 17, calc_crc32c(bytes(raw[21:])))
    compacted = bytes(raw)
    assert read(compacted, batch(15, ["c"]), offset=10) == (["a", "b", "c"], [(2, 14), (3, 15)], 16)
    assert read(compacted, offset=11) == (["b"], [(1, 11)], 15)
    assert read(compacted, offset=10, end=12) == (["a", "b"], [(2, 11)], 15)
