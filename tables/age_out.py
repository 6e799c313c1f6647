"""Age-out over ``seen_ids``: the cutoff, the sweep that deletes what it leaves out, and the
warning when the size cap cuts into the window (the decision itself is ``tables/seen_ids/``).

How age-out works without naming any id a second time: each partition keeps a cutoff rank and
the ids held per rank (``tables/slot_counts.py``: the slot of an id's first sighting, then the
block of its insertion sequence). An id ranked below the cutoff counts as absent, whatever its
entry says (``SeenIds.decide``), so every decision follows from the ids held and the cutoff, not
from how far any deletion got. The cutoff moves up only: to the window's edge (a bucket at a
time, ``tables.window.window_cutoff``) and, when the ids from the cutoff on are more than the
size cap, past the oldest ranks until they fit the cap less 1%. While the counts say ids wait
below the cutoff, a sweep reads the ids in key order from a cursor kept in the summary and
deletes those below it, through the table (a changelog tombstone each), at most
``DEDUPE_EVICTION_BATCH`` deletions and four times as many ids read per processed record; it
stops as soon as none wait. Lookups stay one point read.

Kafka Streams drops a whole time segment of its dedup store at once
(``streams/.../state/internals/AbstractSegments.java``, ``cleanupExpiredSegments``), and its
lookups read every live segment (``segments(timeFrom, timeTo)``); the sweep here pays per id
read instead, once per bucket of stream time (or per 1% of the cap at the cap), and keeps one
lookup per id.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tables.seen_ids.store import SeenIdsStore
from tables.seen_ids.summary import SweepMark
from tables.seen_ids.table import SeenIdsSettings
from tables.slot_counts import LiveCounts, Rank
from tables.transactional import TransactionalTable
from tables.window import (
    CAP_SLACK_DIVISOR,
    block_size,
    effective_window_ms,
    slot_width,
    window_cutoff,
)
from tables.window import rank_of as rank_of_entry

log = logging.getLogger(__name__)


@dataclass
class PartitionState:
    """What the decision and age-out keep of a partition, counting its open transaction."""

    counts: LiveCounts
    cutoff: Rank
    #: Ids held below the cutoff: what the sweep still has to delete.
    below: int
    #: Where the sweep goes on (a disk key; b"": from the first id).
    cursor: bytes
    #: The newest first sighting (or re-arm) held: the partition's stream time.
    stream_ms: int
    #: Ids the open transaction added (first sightings) less those it deleted.
    held_delta: int = 0
    #: The next insertion sequence (None: the committed summary's).
    next_seq: int | None = None
    #: The cutoff or the cursor moved in the open transaction: stored with its commit.
    moved: bool = False
    #: The window's part of the cutoff (ids below it expired; between it and the cutoff, the
    #: cap evicted them).
    window_cut: Rank = (0, 0)
    #: Stream time from which ``window_cut`` moves on (-1: not taken yet).
    cut_until: int = -1
    #: The store's generation of the partition this was read at (``SeenIdsStore.generations``).
    generation: int = 0


def load_state(store: SeenIdsStore, partition: int) -> PartitionState:
    """A partition's state as committed."""
    summary = store.summary(partition)
    counts = LiveCounts(store.counts(partition))
    cutoff = summary.cutoff
    return PartitionState(
        counts,
        cutoff,
        counts.below(cutoff),
        summary.cursor,
        summary.newest_ms,
        generation=store.generations.get(partition, 0),
    )


class AgeOut:
    """The cutoff and the sweep of every partition of ``seen_ids``, per processed record."""

    def __init__(self, table: TransactionalTable, settings: SeenIdsSettings) -> None:
        self.table = table
        self.window_ms = round(settings.window * 1000)
        self.bucket_ms = round(settings.bucket * 1000)
        self.slot_ms = slot_width(self.bucket_ms)
        self.lateness_ms = round(settings.allowed_lateness * 1000)
        self.min_window_ms = round(min(settings.min_window, settings.window) * 1000)
        self.cap = settings.max_ids_per_partition
        self.keep_at_cut = self.cap - self.cap // CAP_SLACK_DIVISOR
        self.block = block_size(self.cap)
        self.batch = settings.eviction_batch
        #: Ids deleted per partition since the start: out of the window, over the cap.
        self.expired: dict[int, int] = {}
        self.evicted: dict[int, int] = {}
        self._warned_at: dict[int, float] = {}

    @property
    def store(self) -> SeenIdsStore:
        store: SeenIdsStore = self.table.data
        return store

    def run(self, partition: int, live: PartitionState, record_ms: int) -> int:
        """Move the cutoff (window and cap) and delete ids below it: at most
        ``DEDUPE_EVICTION_BATCH`` of them; how many went."""
        if live.stream_ms >= live.cut_until or live.counts.total - live.below > self.cap:
            self.move_cutoff(live)
        deleted = self.sweep(partition, live) if live.below > 0 else 0
        if live.moved:
            self.store.stage_sweep(partition, SweepMark(live.cutoff, live.cursor))
        self.check_window(partition, live, record_ms)
        return deleted

    def move_cutoff(self, live: PartitionState) -> None:
        counts = live.counts
        edge = window_cutoff(live.stream_ms, self.window_ms, self.lateness_ms, self.bucket_ms)
        # The window's edge moves a bucket at a time: next when stream time reaches this.
        live.cut_until = edge + self.bucket_ms + self.window_ms + self.lateness_ms
        window_cut = (edge, 0)
        live.window_cut = window_cut
        if window_cut > live.cutoff:
            live.below = counts.below(window_cut)
            live.cutoff = window_cut
            live.moved = True
        if counts.total - live.below <= self.cap:
            return
        # Over the cap: past the oldest ranks until the ids left fit the cap less its slack.
        for rank in counts.ranks_from(live.cutoff):
            if counts.total - live.below <= self.keep_at_cut:
                break
            live.below += counts.count(rank)
            live.cutoff = (rank[0], rank[1] + 1)  # the rank right after this one
        live.moved = True

    def sweep(self, partition: int, live: PartitionState) -> int:
        """Delete ids below the cutoff, reading the ids in key order from the cursor."""
        store, table, cutoff = self.store, self.table, live.cutoff
        rank_of = self.rank_of
        staged = store.staged_writes(partition)
        written_key = store.written_key
        expired = self.expired.get(partition, 0)
        evicted = self.evicted.get(partition, 0)
        deleted = 0
        # Most ids read are not below the cutoff: an entry first seen at or after the end of
        # the cutoff's slot is not (its first 8 bytes, big-endian, compare as the time does),
        # and only the others are decoded.
        cut_slot, cut_block = cutoff
        above = (cut_slot + (self.slot_ms if cut_block else 0)).to_bytes(8, "big")
        cursor = b""  # the end reached: the next sweep starts from the first id
        for visited, (disk_key, raw) in enumerate(store.ids_from(partition, live.cursor), 1):
            if raw[:8] < above and rank_of(raw) < cutoff:
                id_bytes = written_key(disk_key)
                # The open transaction's write of the id, if any, is what the counts hold: a
                # deletion (gone already) or an entry, below the cutoff or not.
                value = staged.get(id_bytes, raw) if staged else raw
                rank = None if value is None else rank_of(value)
                if rank is not None and rank < cutoff:
                    table.put(id_bytes, None, partition)
                    live.counts.add(rank, -1)
                    live.below -= 1
                    live.held_delta -= 1
                    deleted += 1
                    if rank < live.window_cut:
                        expired += 1
                    else:
                        evicted += 1
            if live.below <= 0 or deleted >= self.batch or visited >= 4 * self.batch:
                cursor = disk_key + b"\x00"
                break
        live.cursor = cursor
        live.moved = True
        self.expired[partition] = expired
        self.evicted[partition] = evicted
        return deleted

    def rank_of(self, raw: bytes) -> Rank:
        """The rank of an encoded entry under this partition's slot width and block size."""
        return rank_of_entry(raw, self.slot_ms, self.block)

    def check_window(self, partition: int, live: PartitionState, record_ms: int) -> None:
        if not self.evicted.get(partition) or live.cutoff <= live.window_cut:
            return
        now = time.monotonic()
        if now - self._warned_at.get(partition, -1e9) < 60:
            return
        window = effective_window_ms(record_ms, live.counts.oldest(live.cutoff))
        if window is not None and window < self.min_window_ms:
            self._warned_at[partition] = now
            log.warning(
                "partition %d: effective dedup window is %d ms (%.2f h), under "
                "DEDUPE_MIN_WINDOW (%.1f h): the size cap (%d ids) evicts ids inside the window",
                partition,
                window,
                window / 3_600_000,
                self.min_window_ms / 3_600_000,
                self.cap,
            )
