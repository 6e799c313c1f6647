"""The placement rule and the transaction plan of ``python -m app grow``
(app/admin/grow_plan.py)."""

from __future__ import annotations

import random
import uuid

import pytest
from aiokafka.partitioner import murmur2 as aiokafka_murmur2

from app import strategy
from app.admin.grow_plan import Move, chunks, growth_problem, homes, routing_key
from tables.source_offsets import SOURCE_OFFSETS_KEY


def kafka_partition(key: bytes, partitions: int) -> int:
    """Kafka's default partitioner, from aiokafka's own murmur2 (not the code under test)."""
    return (aiokafka_murmur2(key) & 0x7FFFFFFF) % partitions


@pytest.mark.parametrize(
    ("changelog_key", "route"),
    [
        (b"msg-1", b"msg-1"),
        (b"producer-a", b"producer-a"),
        (strategy.scoped_key(b"msg-1", b"web"), b"msg-1"),
        (strategy.scoped_key(b"m", b"s" * 255), b"m"),
        (strategy.fingerprint_key("00ff" * 8), b"00ff" * 8),
        (SOURCE_OFFSETS_KEY, None),
    ],
)
def test_routing_key(changelog_key: bytes, route: bytes | None) -> None:
    assert routing_key(changelog_key) == route


@pytest.mark.parametrize(("old", "k"), [(4, 2), (8, 2), (8, 3), (1, 16)])
def test_every_id_of_an_old_partition_goes_to_it_or_a_new_one(old: int, k: int) -> None:
    ids = [str(uuid.UUID(int=random.Random(i).getrandbits(128))).encode() for i in range(3000)]
    new = homes(ids, old * k)
    assert new == [kafka_partition(i, old * k) for i in ids]
    stayed = 0
    for i, q in zip(ids, new, strict=True):
        p = kafka_partition(i, old)
        assert q is not None and q % old == p and (q == p or q >= old)
        stayed += q == p
    # about 1/k stay where they are
    assert abs(stayed / len(ids) - 1 / k) < 0.05


def test_scoped_and_fingerprint_keys_go_where_their_records_were_placed() -> None:
    scoped = strategy.scoped_key(b"abc", b"web")
    print_hex = "0123456789abcdef" * 2
    keys = [scoped, strategy.fingerprint_key(print_hex), SOURCE_OFFSETS_KEY]
    assert homes(keys, 16) == [
        kafka_partition(b"abc", 16),
        kafka_partition(print_hex.encode(), 16),
        None,
    ]


@pytest.mark.parametrize(
    ("counts", "target", "problem"),
    [
        ({"a": 8, "b": 8}, 16, None),
        ({"a": 8, "b": 16}, 16, None),  # an interrupted run: finish it
        ({"a": 16, "b": 16}, 16, None),  # done: the move is idempotent
        ({"a": 8, "b": 8}, 12, "12 is not a multiple of the current count 8"),
        ({"a": 8, "b": 8}, 4, "cannot take partitions away"),
        ({"a": 8, "b": 16}, 8, "cannot take partitions away: 'b' (16)"),
        ({"a": 4, "b": 8}, 16, "topics disagree beyond an interrupted growth to 16: 'b' (8)"),
        ({"a": 8}, 0, "at least 1"),
    ],
)
def test_growth_problem(counts: dict[str, int], target: int, problem: str | None) -> None:
    found = growth_problem(counts, target)
    if problem is None:
        assert found is None
    else:
        assert found is not None and problem in found, found


def _move(key: bytes, source: int, to: int) -> Move:
    return Move(key, b"v" + key, (), 1, source, to)


def test_chunks_cover_every_move_once_in_key_order() -> None:
    moves = [_move(f"k{i:03d}".encode(), i % 3, 3 + i % 3) for i in range(10)][::-1]
    plan = chunks(moves, 4)
    assert [len(c) for c in plan] == [4, 4, 2]
    flat = [m for c in plan for m in c]
    assert sorted(flat, key=lambda m: (m.source, m.key)) == flat
    assert sorted(m.key for m in flat) == sorted(m.key for m in moves)
    assert chunks([], 4) == []
    with pytest.raises(ValueError, match="at least 1"):
        chunks(moves, 0)


@pytest.mark.parametrize("crash_after", [0, 1, 3, 7])
def test_a_crash_between_transactions_leaves_each_id_once_and_a_rerun_finishes(
    crash_after: int,
) -> None:
    """A fake changelog (partition -> {key: value}) where a transaction applies a chunk's copies
    and tombstones together: stop after ``crash_after`` transactions, plan again from what is
    there (as a re-run reads it), finish; every id is in exactly one partition throughout."""
    old, new = 4, 8
    ids = [f"id-{i}".encode() for i in range(400)]
    log: dict[int, dict[bytes, bytes]] = {p: {} for p in range(new)}
    for i in ids:
        log[kafka_partition(i, old)][i] = b"first-seen:" + i

    def plan() -> list[list[Move]]:
        moves = []
        for p, entries in log.items():
            keys = list(entries)
            for key, q in zip(keys, homes(keys, new), strict=True):
                if q != p:
                    assert q is not None
                    moves.append(Move(key, entries[key], (), None, p, q))
        return chunks(moves, 25)

    def holders(key: bytes) -> list[int]:
        return [p for p, entries in log.items() if key in entries]

    def commit(chunk: list[Move]) -> None:
        for m in chunk:
            log[m.to][m.key] = m.value
            del log[m.source][m.key]

    first = plan()
    assert len(first) > crash_after
    for chunk in first[:crash_after]:
        commit(chunk)
    assert all(len(holders(i)) == 1 for i in ids)
    for chunk in plan():
        commit(chunk)
    assert plan() == []
    for i in ids:
        assert holders(i) == [kafka_partition(i, new)]
        assert log[kafka_partition(i, new)][i] == b"first-seen:" + i
