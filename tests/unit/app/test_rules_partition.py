"""Table-driven tests of ``rules.partition_for`` (Kafka's Java murmur2 default partitioner,
against a reference and Kafka's vectors) and ``rules.misplaced`` (a record not keyed and placed
by its messageId)."""

from __future__ import annotations

import struct

import pytest

from app import rules
from app.rules import Valid

# --- partition_for: Kafka's Java murmur2 default partitioner --------------------------------


def java_murmur2(data: bytes) -> int:
    """Independent port of ``org.apache.kafka.common.utils.Utils.murmur2`` (signed 32-bit)."""
    mask = 0xFFFFFFFF
    seed, m, r = 0x9747B28C, 0x5BD1E995, 24
    length = len(data)
    h = (seed ^ length) & mask
    whole = length - length % 4
    for (k,) in struct.iter_unpack("<I", data[:whole]):
        k = (k * m) & mask
        k ^= k >> r
        k = (k * m) & mask
        h = ((h * m) & mask) ^ k
    tail = data[whole:]
    if len(tail) == 3:
        h ^= tail[2] << 16
    if len(tail) >= 2:
        h ^= tail[1] << 8
    if len(tail) >= 1:
        h ^= tail[0]
        h = (h * m) & mask
    h ^= h >> 13
    h = (h * m) & mask
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def java_partition(key: bytes, partitions: int) -> int:
    """``Utils.toPositive(Utils.murmur2(key)) % numPartitions``."""
    return (java_murmur2(key) & 0x7FFFFFFF) % partitions


#: From apache/kafka clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
#: (testMurmur2): signed Java int results of Utils.murmur2.
KAFKA_MURMUR2_VECTORS = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]

PARTITION_COUNTS = [1, 3, 8, 12]


@pytest.mark.parametrize(("key", "expected"), KAFKA_MURMUR2_VECTORS)
def test_reference_murmur2_matches_kafka_vectors(key: bytes, expected: int) -> None:
    # Guards the reference implementation the other partition tests rely on.
    assert java_murmur2(key) == expected


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
@pytest.mark.parametrize(("key", "java_hash"), KAFKA_MURMUR2_VECTORS)
def test_partition_for_kafka_vectors(key: bytes, java_hash: int, partitions: int) -> None:
    # Java: Utils.toPositive(hash) % n, toPositive(x) = x & 0x7fffffff (not abs()).
    assert rules.partition_for(key, partitions) == (java_hash & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(
    ("key", "partitions", "expected"),
    [
        # toPositive(-973932308) = 1173551340; abs() would give 973932308 -> 2 (mod 3).
        (b"21", 3, 1173551340 % 3),
        (b"21", 12, 1173551340 % 12),
        (b"abc", 8, 479470107 % 8),
        (b"foobar", 12, (2**31 - 790332482) % 12),
    ],
)
def test_partition_for_hard_coded(key: bytes, partitions: int, expected: int) -> None:
    assert rules.partition_for(key, partitions) == expected


REFERENCE_KEYS = [
    b"a",
    b"ab",
    b"abc",
    b"abcd",
    b"abcde",
    b"6f1a0c3e-4b2d-4e5f-8a9b-0c1d2e3f4a5b",
    b"ajs-0123456789abcdef0123456789abcdef",
    "été-😀".encode(),
    b"\x00\x01\x02\xff\xfe\x80",
    bytes(range(256)),
]


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
@pytest.mark.parametrize("key", REFERENCE_KEYS)
def test_partition_for_matches_reference(key: bytes, partitions: int) -> None:
    got = rules.partition_for(key, partitions)
    assert got == java_partition(key, partitions)
    assert 0 <= got < partitions


def test_partition_for_spreads_keys() -> None:
    # A constant or truncated hash would put these in few partitions.
    ids = [f"id-{i}".encode() for i in range(400)]
    used = {rules.partition_for(i, 12) for i in ids}
    assert used == set(range(12))
    assert [rules.partition_for(i, 12) for i in ids] == [java_partition(i, 12) for i in ids]


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_partitions_for_a_batch_matches_one_by_one(partitions: int) -> None:
    # Every length from 0 to 41 bytes, each often enough to take the array path (>= 8 keys),
    # plus lengths seen once (the scalar path), shuffled so groups interleave.
    keys = [
        f"{n}-".encode().ljust(length, b"x")[:length] for n in range(12) for length in range(42)
    ]
    keys += REFERENCE_KEYS + [bytes(range(256))[:n] for n in (5, 77, 255)]
    keys = keys[::7] + keys[1::7] + keys[2::7] + keys[3::7] + keys[4::7] + keys[5::7] + keys[6::7]
    assert rules.partitions_for(keys, partitions) == [java_partition(k, partitions) for k in keys]
    assert rules.murmur2_many(keys) == [rules.murmur2(k) for k in keys]
    assert rules.partitions_for([], partitions) == []


# --- misplaced: not keyed and placed by its messageId ------------------------------------------


EVENT = Valid("6f1a0c3e-4b2d-4e5f-8a9b", b"6f1a0c3e-4b2d-4e5f-8a9b")

HOME = java_partition(EVENT.id_bytes, 8)

AWAY = (HOME + 1) % 8


@pytest.mark.parametrize(
    ("key", "partition", "expected"),
    [
        pytest.param(EVENT.id_bytes, HOME, False, id="keyed-and-placed"),
        pytest.param(None, HOME, True, id="null-key"),
        pytest.param(b"other", HOME, True, id="other-key-right-partition"),
        pytest.param(b"", HOME, True, id="empty-key"),
        pytest.param(EVENT.id_bytes + b" ", HOME, True, id="key-with-suffix"),
        pytest.param(EVENT.id_bytes.upper(), HOME, True, id="key-other-case"),
        pytest.param(EVENT.id_bytes, AWAY, True, id="right-key-wrong-partition"),
        pytest.param(None, AWAY, True, id="null-key-wrong-partition"),
    ],
)
def test_misplaced(key: bytes | None, partition: int, expected: bool) -> None:
    assert rules.misplaced(key, partition, EVENT.id_bytes, 8) is expected
    key_partition = rules.partitions_for([key or b""], 8)[0]
    assert rules.misplaced(key, partition, EVENT.id_bytes, 8, key_partition) is expected


@pytest.mark.parametrize("partitions", PARTITION_COUNTS)
def test_misplaced_uses_partition_count(partitions: int) -> None:
    home = java_partition(EVENT.id_bytes, partitions)
    assert rules.misplaced(EVENT.id_bytes, home, EVENT.id_bytes, partitions) is False
    for other in range(partitions):
        if other != home:
            assert rules.misplaced(EVENT.id_bytes, other, EVENT.id_bytes, partitions) is True
