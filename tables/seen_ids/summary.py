"""What ``seen_ids`` keeps per partition beside the ids, in the bookkeeping family: the summary
and the ids held per age rank (``tables/slot_counts.py``), and their layout on disk. Both are
derived from the ids (``tables/seen_ids/store.py`` keeps them in step at each commit and
restore) and never replicated.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import cast

from tables.rocks import PartitionDB
from tables.slot_counts import Rank

#: Key (in META_CF) of the partition's summary.
SUMMARY_KEY = b"seen-ids-summary"
#: Prefix of the keys (in META_CF) of the counts: the prefix, then the rank's slot start and
#: sequence block (8 bytes each, big-endian) -> the ids held of that rank (8 bytes).
RANK_PREFIX = b"seen-ids-rank/"


@dataclass
class Summary:
    """Per partition, kept in the store's bookkeeping family."""

    held: int = 0
    #: The sequence a worker that reads the partition gives out next: the start of the block
    #: after the newest written (entries keep their block's start only).
    next_seq: int = 0
    #: The newest first sighting written: the partition's stream time.
    newest_ms: int = 0
    #: Age-out's cutoff: ids ranked below it count as absent (``tables/seen_ids/``).
    cutoff: Rank = (0, 0)
    #: The slot width and block size the counts were taken with (0: no counts yet).
    slot_ms: int = 0
    block: int = 0
    #: Where the sweep goes on: the ids' keys from here on are still to be looked at.
    cursor: bytes = b""

    def encode(self) -> bytes:
        return (
            self.held.to_bytes(8, "big")
            + self.next_seq.to_bytes(8, "big")
            + self.newest_ms.to_bytes(8, "big")
            + self.cutoff[0].to_bytes(8, "big")
            + self.cutoff[1].to_bytes(8, "big")
            + self.slot_ms.to_bytes(8, "big")
            + self.block.to_bytes(8, "big")
            + self.cursor
        )

    @classmethod
    def of_forms_1_and_2(cls, raw: bytes) -> Summary:
        """The summary of a database of key form 1 or 2: ids held, next sequence and newest
        first sighting as now (the first 24 bytes), then the age-out index's seek hint, which
        has no use here. No cutoff and no counts yet (slot width 0: count the ids)."""
        return cls.decode(raw[:24] + bytes(32))

    @classmethod
    def decode(cls, raw: bytes | None) -> Summary:
        if raw is None:
            return cls()
        n = [int.from_bytes(raw[i : i + 8], "big") for i in range(0, 56, 8)]
        return cls(n[0], n[1], n[2], (n[3], n[4]), n[5], n[6], raw[56:])


@dataclass
class SweepMark:
    """What age-out moved in the open transaction, stored with the partition's next commit."""

    cutoff: Rank
    cursor: bytes


def rank_key(rank: Rank) -> bytes:
    return RANK_PREFIX + rank[0].to_bytes(8, "big") + rank[1].to_bytes(8, "big")


def stored_counts(pdb: PartitionDB) -> Iterator[tuple[bytes, Rank, int]]:
    """The stored counts: (key, rank, count) in rank order."""
    start = len(RANK_PREFIX)
    for key, raw in cast(Iterator[tuple[bytes, bytes]], pdb.meta.items(from_key=RANK_PREFIX)):
        if not key.startswith(RANK_PREFIX):
            return
        rank = (
            int.from_bytes(key[start : start + 8], "big"),
            int.from_bytes(key[start + 8 :], "big"),
        )
        yield key, rank, int.from_bytes(raw, "big")
