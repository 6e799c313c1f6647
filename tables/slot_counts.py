"""How many ids a partition holds per age rank: what age-out decides from.

An id's rank is (the slot of its first sighting, the block of its insertion sequence): slots
are :data:`tables.window.SLOTS_PER_BUCKET` or more to an age-out bucket, blocks
:func:`tables.window.block_size` sequence numbers, a power of two within a 256th of the size
cap. Ranks order ids oldest first as the age-out index of earlier versions did (time bucket,
then insertion order), to a block's width.

Age-out (``tables/seen_ids/``) keeps one cutoff rank per partition: an id ranked below it is
out of the window or over the size cap, and counts as absent whatever its entry says. The
counts say how many ids the cutoff leaves (the cap), how many wait below it for the sweep to
delete them (the sweep runs only while some do), and the oldest slot still held (the effective
window), without a second copy of every id: the ids are stored once, in the ids' own column
family, and the counts take one small entry per rank, a few per slot. A rank holds at most a
block's worth of ids, so the cap cuts at most that many more than it must.

The committed counts live in the store's bookkeeping family and change in the same batch as the
ids (``tables/seen_ids/store.py``); :class:`LiveCounts` lays the open transaction's changes over
them.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator

#: (slot start ms, sequence // block size): an id's place in age-out's order.
Rank = tuple[int, int]


class SlotCounts:
    """Ids held per rank (no zero counts), with the ranks in order."""

    __slots__ = ("counts", "ranks", "total")

    def __init__(self, counts: dict[Rank, int] | None = None) -> None:
        self.counts = {r: n for r, n in (counts or {}).items() if n}
        self.ranks = sorted(self.counts)
        self.total = sum(self.counts.values())

    def apply(self, changes: dict[Rank, int]) -> None:
        """Add ``changes`` (rank -> change of its count)."""
        counts, ranks = self.counts, self.ranks
        for rank, change in changes.items():
            if not change:
                continue
            n = counts.get(rank, 0) + change
            self.total += change
            if n:
                if rank not in counts:
                    bisect.insort(ranks, rank)
                counts[rank] = n
            else:
                del counts[rank]
                del ranks[bisect.bisect_left(ranks, rank)]

    def below(self, cutoff: Rank) -> int:
        """Ids ranked below ``cutoff``."""
        counts = self.counts
        return sum(counts[r] for r in self.ranks[: bisect.bisect_left(self.ranks, cutoff)])


class LiveCounts:
    """The committed counts with the open transaction's changes laid over them."""

    __slots__ = ("committed", "delta", "delta_total")

    def __init__(self, committed: SlotCounts) -> None:
        self.committed = committed
        self.delta: dict[Rank, int] = {}
        self.delta_total = 0

    @property
    def total(self) -> int:
        return self.committed.total + self.delta_total

    def add(self, rank: Rank, change: int) -> None:
        self.delta[rank] = self.delta.get(rank, 0) + change
        self.delta_total += change

    def count(self, rank: Rank) -> int:
        return self.committed.counts.get(rank, 0) + self.delta.get(rank, 0)

    def ranks_from(self, start: Rank) -> Iterator[Rank]:
        """Ranks from ``start`` on that hold or held ids, in order (one emptied in the open
        transaction may come with a count of 0)."""
        committed = self.committed.ranks
        known = self.committed.counts
        extra = sorted(r for r in self.delta if r >= start and r not in known)
        i = bisect.bisect_left(committed, start)
        j = 0
        while i < len(committed) or j < len(extra):
            if j == len(extra) or (i < len(committed) and committed[i] < extra[j]):
                yield committed[i]
                i += 1
            else:
                yield extra[j]
                j += 1

    def below(self, cutoff: Rank) -> int:
        """Ids ranked below ``cutoff``, counting the open transaction."""
        n = self.committed.below(cutoff)
        return n + sum(c for r, c in self.delta.items() if r < cutoff)

    def oldest(self, cutoff: Rank) -> int | None:
        """The slot of the first rank at or after ``cutoff`` that holds an id (None: none)."""
        for rank in self.ranks_from(cutoff):
            if self.count(rank) > 0:
                return rank[0]
        return None
