"""The counts age-out decides from (``tables/slot_counts.py``): committed counts kept in rank
order through changes, the open transaction's changes laid over them, ids below a cutoff, the
oldest slot held; checked against a plain recount over random changes."""

from __future__ import annotations

import random

from tables.slot_counts import LiveCounts, Rank, SlotCounts


def recount(changes: list[tuple[Rank, int]]) -> dict[Rank, int]:
    counts: dict[Rank, int] = {}
    for rank, change in changes:
        counts[rank] = counts.get(rank, 0) + change
    return {r: n for r, n in counts.items() if n}


def test_committed_counts_keep_their_ranks_in_order_and_drop_zeros() -> None:
    counts = SlotCounts({(10, 0): 2, (5, 1): 1, (5, 0): 0})
    assert counts.ranks == [(5, 1), (10, 0)] and counts.total == 3
    counts.apply({(5, 1): -1, (7, 3): 4, (10, 0): 0})
    assert counts.ranks == [(7, 3), (10, 0)] and counts.counts == {(7, 3): 4, (10, 0): 2}
    assert counts.total == 6
    assert counts.below((10, 0)) == 4 and counts.below((10, 1)) == 6 and counts.below((0, 0)) == 0


def test_live_counts_agree_with_a_recount_over_random_changes() -> None:
    rnd = random.Random(5)
    history: list[tuple[Rank, int]] = []
    committed = SlotCounts()
    for _ in range(30):  # transactions
        live = LiveCounts(committed)
        staged: list[tuple[Rank, int]] = []
        for _ in range(rnd.randint(0, 40)):
            rank = (rnd.randrange(0, 500, 50), rnd.randrange(4))
            held = recount(history + staged).get(rank, 0)
            change = -1 if held and rnd.random() < 0.4 else 1
            live.add(rank, change)
            staged.append((rank, change))
        expected = recount(history + staged)
        assert live.total == sum(expected.values())
        for rank in {r for r, _ in staged} | set(committed.counts):
            assert live.count(rank) == expected.get(rank, 0)
        cutoff = (rnd.randrange(0, 550, 50), rnd.randrange(4))
        assert live.below(cutoff) == sum(n for r, n in expected.items() if r < cutoff)
        listed = list(live.ranks_from(cutoff))
        assert listed == sorted(listed) and len(set(listed)) == len(listed)
        assert {r for r in listed if live.count(r)} == {r for r in expected if r >= cutoff}
        held = [r for r in sorted(expected) if r >= cutoff]
        assert live.oldest(cutoff) == (held[0][0] if held else None)
        if rnd.random() < 0.8:  # committed: the store applies the same changes
            committed.apply(recount(staged) or {})
            for rank, change in staged:
                history.append((rank, change))
            assert committed.counts == recount(history)
