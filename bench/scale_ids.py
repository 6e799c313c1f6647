"""The ids of the scale benchmark (bench/scale.py): UUIDv4-shaped messageIds numbered by an
integer, their first-sighting times, and samples of them per partition. Pure functions
(tests/unit/test_bench_scale.py); bench/recovery.py uses the same ids."""

from __future__ import annotations

from collections.abc import Callable, Iterator

T0 = 1_790_000_000_000
#: First sightings of the ids held are spread over this span (inside the default 28-day window).
SPAN_MS = 27 * 86_400_000
MASK64 = (1 << 64) - 1


def mix64(z: int) -> int:
    """SplitMix64's finaliser: a bijection on 64-bit integers that looks random."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uuid_like(i: int) -> bytes:
    """Id number ``i`` (0 <= i < 2**64) as a 36-byte UUIDv4-shaped messageId.

    All 64 bits of ``mix64(i)`` are in the string, so distinct ``i`` give distinct ids; another
    56 pseudo-random bits fill the rest; version nibble ``4`` and an RFC 4122 variant as in
    ``uuid.uuid4()``.
    """
    h = f"{mix64(i):016x}"
    lo = mix64(i ^ 0x5DEECE66D5DEECE6)
    low = f"{lo >> 8:014x}"
    return (f"{h[:8]}-{h[8:12]}-4{h[12:15]}-{'89ab'[lo & 3]}{low[:3]}-{h[15]}{low[3:]}").encode()


def first_seen_ms(i: int, ids: int) -> int:
    """Record time of the first sighting of id ``i`` of ``ids``: spread evenly over SPAN_MS."""
    return T0 + i * SPAN_MS // max(ids, 1)


def sample_by_partition(
    numbers: Iterator[int], partitions: int, per_partition: int, part: Callable[[bytes], int]
) -> list[list[bytes]]:
    """Ids ``uuid_like(n)`` for ``n`` from ``numbers``, ``per_partition`` for each partition."""
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    missing = partitions
    for n in numbers:
        key = uuid_like(n)
        bucket = out[part(key)]
        if len(bucket) < per_partition:
            bucket.append(key)
            if len(bucket) == per_partition:
                missing -= 1
                if not missing:
                    break
    return out
