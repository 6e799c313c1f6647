"""The ids of the scale benchmark (bench/scale.py): messageIds of one shape numbered by an
integer (UUIDv4-shaped by default, :data:`ID_SHAPES` for the others), their first-sighting
times, and samples of them per partition. Pure functions (tests/unit/bench/test_bench_scale.py);
bench/recovery.py uses the same UUID-shaped ids.

Every shape is a pure function of ``i`` (0 <= i < 2**63) that keeps all 64 bits of
``mix64(i)`` (a bijection) in the text, so distinct ``i`` give distinct ids of that shape, and
ids of different shapes never collide (each shape has its own fixed form). The shapes are the
common ones of real message ids: which of them ``tables/keys.py`` packs, and which stay text, is
what the benchmark's disk bytes per id compare.
"""

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


def _salt(i: int) -> int:
    """Another 64 pseudo-random bits of ``i``, independent of ``mix64(i)``."""
    return mix64(i ^ 0x5DEECE66D5DEECE6)


def ajs_like(i: int) -> bytes:
    """Segment's anonymous-id shape: ``ajs-`` and 32 lowercase hex digits (the first 16 are
    ``mix64(i)``)."""
    return f"ajs-{mix64(i):016x}{_salt(i):016x}".encode()


def ajs_next_like(i: int) -> bytes:
    """analytics.js's message id today (segmentio/analytics-next, ``createMessageId``):
    ``ajs-next-``, the time in epoch ms, ``-`` and :func:`uuid_like` (which makes it distinct)."""
    return b"ajs-next-%d-" % (T0 + i % SPAN_MS) + uuid_like(i)


def upper_uuid_like(i: int) -> bytes:
    """:func:`uuid_like` in upper case, with the variant digit ``A`` or ``B`` so that each id
    has a letter (an all-digit UUID is canonical and would pack as one)."""
    text = uuid_like(i).upper()
    return text[:19] + b"AB"[_salt(i) & 1 : (_salt(i) & 1) + 1] + text[20:]


def hex_like(i: int) -> bytes:
    """32 lowercase hex digits (an MD5-sized digest), the first 16 ``mix64(i)``."""
    return f"{mix64(i):016x}{_salt(i):016x}".encode()


_DECIMAL_END = 10**19


def decimal_like(i: int) -> bytes:
    """A decimal number below 10**19 (at most 19 digits, no leading zero), spread over the
    range as snowflake-style numeric ids are. ``mix64`` is applied again until the value is in
    range (cycle walking): a permutation restricted that way stays one, so distinct ``i`` below
    10**19 give distinct numbers."""
    z = mix64(i)
    while z >= _DECIMAL_END:
        z = mix64(z)
    return str(z).encode()


_LETTERS = "ABCDEFGHJKLMNPQRSTUVWXYZ"


def ascii_like(i: int) -> bytes:
    """An ASCII id of no packed shape: ``order-``, the number ``mix64(i)`` and three capital
    letters (20-29 characters; the letters end the number, so no two ids coincide)."""
    s = _salt(i)
    letters = "".join(_LETTERS[(s >> (5 * k)) % len(_LETTERS)] for k in range(3))
    return f"order-{mix64(i)}{letters}".encode()


_CYRILLIC = "абвгдежзиклмнопрстуфхцчшэюя"


def non_ascii_like(i: int) -> bytes:
    """A UTF-8 id with non-ASCII characters: ``заказ-`` (Russian for "order"), the number
    ``mix64(i)`` and two Cyrillic letters (20-28 characters, 28-36 bytes)."""
    s = _salt(i)
    letters = "".join(_CYRILLIC[(s >> (5 * k)) % len(_CYRILLIC)] for k in range(2))
    return f"заказ-{mix64(i)}{letters}".encode()


#: The issue's mix, a quarter of each, by ``i % 4``.
_MIX = (uuid_like, ajs_like, ascii_like, non_ascii_like)


def mix_like(i: int) -> bytes:
    """A quarter each of canonical UUIDs, ``ajs-`` ids, other ASCII ids and non-ASCII ids."""
    return _MIX[i % 4](i)


#: The ``--id-shape`` choices of ``python -m bench.scale``: shape name -> id of number ``i``.
ID_SHAPES: dict[str, Callable[[int], bytes]] = {
    "uuid": uuid_like,
    "ajs": ajs_like,
    "ajs-next": ajs_next_like,
    "upper-uuid": upper_uuid_like,
    "hex": hex_like,
    "decimal": decimal_like,
    "ascii": ascii_like,
    "non-ascii": non_ascii_like,
    "mix": mix_like,
}


def first_seen_ms(i: int, ids: int) -> int:
    """Record time of the first sighting of id ``i`` of ``ids``: spread evenly over SPAN_MS."""
    return T0 + i * SPAN_MS // max(ids, 1)


def sample_by_partition(
    numbers: Iterator[int],
    partitions: int,
    per_partition: int,
    part: Callable[[bytes], int],
    id_of: Callable[[int], bytes] = uuid_like,
) -> list[list[bytes]]:
    """Ids ``id_of(n)`` for ``n`` from ``numbers``, ``per_partition`` for each partition."""
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    missing = partitions
    for n in numbers:
        key = id_of(n)
        bucket = out[part(key)]
        if len(bucket) < per_partition:
            bucket.append(key)
            if len(bucket) == per_partition:
                missing -= 1
                if not missing:
                    break
    return out
