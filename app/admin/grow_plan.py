"""The pure rules of growing the partition count (``python -m app grow``,
``app/admin/grow.py``): which partition a changelog key belongs to, whether a growth is allowed,
and the transactions a move is cut into. No I/O; table-driven tests in
``tests/unit/app/admin/test_grow_plan.py``.

Placement: a record is decided in the partition Kafka's default partitioner gives its routing
key, ``(murmur2(key) & 0x7fffffff) % partitions`` (``app/rules.py``; Kafka's
``BuiltInPartitioner.partitionForKey`` and ``Utils.murmur2``), and its changelog records go to
that same partition. The changelog key is not always the routing key:

- a plain message id, or a producer name (``producer_seqs``): the key itself;
- a source-scoped id (``0xFE``, the source's length and name, then the id): the id;
- a fingerprint (``0xFF`` and 16 bytes): its 32 lowercase hex digits, the key the record was
  placed by (``app/worker/dedup.py``);
- any other ``0xFF`` key (the source-offsets record, ``tables/source_offsets.py``): none, it
  belongs to the partition that holds it and never moves.

Why the new count must be a multiple of the old: with ``M = k * N``, ``h % M`` is one of
``h % N + j * N`` (j < k), so the ids of old partition p go to p or to new partitions only: old
partitions only lose ids, each new partition takes ids from exactly one old one, and 1/k of the
ids stay put. Any other M would move ids between old partitions too (most of them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app import rules
from tables.key_prefixes import RESERVED_TAG, SCOPED_TAG

#: Length of a fingerprint key (``app.strategy.fingerprint_key``): the tag and 16 bytes.
_FINGERPRINT_KEY_BYTES = 17


def routing_key(changelog_key: bytes) -> bytes | None:
    """The key a changelog record's input was placed by; None for keys that never move."""
    if changelog_key[:1] == SCOPED_TAG and len(changelog_key) >= 2:
        return changelog_key[2 + changelog_key[1] :]
    if changelog_key[:1] == RESERVED_TAG:
        if len(changelog_key) == _FINGERPRINT_KEY_BYTES:
            return changelog_key[1:].hex().encode()
        return None
    return changelog_key


def homes(changelog_keys: Sequence[bytes], partitions: int) -> list[int | None]:
    """The partition each changelog key belongs to under ``partitions`` (None: stays where it
    is), vectorised over a fetched batch (``rules.partitions_for``)."""
    routes = [routing_key(k) for k in changelog_keys]
    placed = rules.partitions_for([r for r in routes if r is not None], partitions)
    found = iter(placed)
    return [None if r is None else next(found) for r in routes]


def growth_problem(counts: dict[str, int], target: int) -> str | None:
    """Why the topics (name -> partition count) cannot grow to ``target`` partitions; None when
    they can (including when some or all already have ``target``: a re-run finishes the job)."""
    if target < 1:
        return f"--partitions must be at least 1, not {target}"
    bigger = sorted(t for t, n in counts.items() if n > target)
    if bigger:
        listed = ", ".join(f"{t!r} ({counts[t]})" for t in bigger)
        return f"Kafka cannot take partitions away: {listed} already have more than {target}"
    old = min(counts.values())
    if target % old:
        return (
            f"{target} is not a multiple of the current count {old}: only a multiple keeps "
            f"each id in its partition or moves it to a new one (murmur2(id) % {old} is then "
            f"murmur2(id) % {target} % {old}); try {old * max(2, -(-target // old))}"
        )
    odd = sorted(t for t, n in counts.items() if n not in (old, target))
    if odd:
        listed = ", ".join(f"{t!r} ({counts[t]})" for t in odd)
        return (
            f"topics disagree beyond an interrupted growth to {target}: {listed}, while the "
            f"others have {old} or {target}"
        )
    return None


@dataclass(frozen=True, slots=True)
class Move:
    """One changelog entry to carry: its bytes to partition ``to``, a tombstone in ``source``."""

    key: bytes
    value: bytes
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int | None
    source: int
    to: int


def chunks(moves: Sequence[Move], size: int) -> list[list[Move]]:
    """The moves cut into transactions of at most ``size`` entries, in key order (a re-run
    meets the same order). Each transaction writes an entry's copy and its tombstone together,
    so every id is in exactly one partition whichever transactions committed."""
    if size < 1:
        raise ValueError(f"chunk size must be at least 1, not {size}")
    ordered = sorted(moves, key=lambda m: (m.source, m.key))
    return [list(ordered[i : i + size]) for i in range(0, len(ordered), size)]
