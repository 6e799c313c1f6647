"""``SeenIds``: the dedup decision and the age-out over the ``seen_ids`` table (declared, with
its retention, in ``tables/seen_ids_table.py``).

How age-out stays cheap: each partition's database keeps a local secondary index (its own column
family, derived from the table's writes in the same atomic batch, never replicated) keyed by
(time bucket of the first sighting, insertion sequence). Age-out walks it from a persisted seek
hint, so it never rescans tombstones, deletes in bounded batches (``DEDUPE_EVICTION_BATCH`` per
processed record) and stops at the first id that may stay. Lookups stay one point read.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from tables.seen_ids_index import SeenIdsStore
from tables.seen_ids_table import SeenIdsSettings
from tables.transactional import TransactionalTable
from tables.window import (
    Entry,
    Verdict,
    bucket_expired,
    bucket_of_index_key,
    bucket_start,
    effective_window_ms,
    encode_entry,
    judge,
    over_cap,
    rearms,
)

log = logging.getLogger(__name__)

# Module constants: read per record, faster than the enum's class attributes.
_FIRST, _REPEAT, _REUSED = Verdict.FIRST, Verdict.REPEAT, Verdict.REUSED


@dataclass
class _Live:
    """What the open transaction changed in a partition, over its committed summary."""

    held_delta: int = 0
    next_seq: int | None = None
    hint: bytes | None = None
    stream_ms: int = 0
    #: First-seen time of the oldest id held, once known (for the effective window).
    oldest_ms: int | None = None
    oldest_bucket: int | None = None
    scanned: bool = False
    #: (bucket, first-seen ms) of the oldest first sighting of the open transaction: not in the
    #: committed index yet, so a scan cannot see it.
    staged_oldest: tuple[int, int] | None = None


class SeenIds:
    """The dedup decision and age-out over ``seen_ids``, for the record being processed."""

    def __init__(self, table: TransactionalTable, settings: SeenIdsSettings) -> None:
        self.table = table
        self.window_ms = round(settings.window * 1000)
        self.bucket_ms = round(settings.bucket * 1000)
        self.lateness_ms = round(settings.allowed_lateness * 1000)
        self.min_window_ms = round(min(settings.min_window, settings.window) * 1000)
        self.cap = settings.max_ids_per_partition
        self.batch = settings.eviction_batch
        self._live: dict[int, _Live] = {}
        self.evicted: dict[int, int] = {}
        self.expired: dict[int, int] = {}
        self._warned_at: dict[int, float] = {}

    @property
    def store(self) -> SeenIdsStore:
        store: SeenIdsStore = self.table.data
        return store

    def _state(self, partition: int) -> _Live:
        live = self._live.get(partition)
        if live is None:
            live = self._live[partition] = _Live()
            live.stream_ms = self.store.summary(partition).newest_ms
        return live

    def held(self, partition: int) -> int:
        """Ids held in ``partition``, counting the open transaction."""
        live = self._live.get(partition)
        return self.store.summary(partition).held + (live.held_delta if live else 0)

    # -- per record ----------------------------------------------------------------------------

    def decide(
        self,
        id_bytes: bytes,
        record_ms: int,
        partition: int,
        content: bytes = b"",
        last_seen: bool = False,
    ) -> Verdict:
        """Judge a copy of ``id_bytes`` (:func:`tables.window.judge`) and remember it: a first
        sighting is stored (with ``content``, its hash, when given), a repeat counted (and,
        with ``last_seen``, its clock re-armed: :meth:`_rearm`), a reuse left as it is.
        ``partition``: the record's (passed in, never read from the table's context)."""
        table = self.table
        raw = table.lookup(id_bytes, partition)
        held = None if raw is None else Entry.decode(raw)
        live = self._live.get(partition) or self._state(partition)
        if held is not None:
            verdict = judge(held, record_ms, self.window_ms, content)
            if verdict is _REPEAT:
                if last_seen and rearms(held, record_ms, last_seen):
                    self._rearm(id_bytes, held, record_ms, partition, live)
                else:
                    table.put(id_bytes, held.repeated().encode(), partition)
                return verdict
            if verdict is _REUSED:
                return verdict
        # Stream time is the newest first sighting held: derived from the state alone, so a
        # worker restarted from the changelog ages out exactly as the live one did.
        if record_ms > live.stream_ms:
            live.stream_ms = record_ms
        seq = live.next_seq
        if seq is None:
            seq = self.store.summary(partition).next_seq
        live.next_seq = seq + 1
        if held is None:
            live.held_delta += 1
        table.put(id_bytes, encode_entry(record_ms, seq, 0, content), partition)
        mark = (record_ms - record_ms % self.bucket_ms, record_ms)
        if live.staged_oldest is None or mark < live.staged_oldest:
            live.staged_oldest = mark
        self._fold_staged(live)
        return _FIRST

    def _rearm(
        self, id_bytes: bytes, held: Entry, record_ms: int, partition: int, live: _Live
    ) -> None:
        """A repeat under ``last_seen``: the id's clock restarts at ``record_ms``. The entry is
        written as a first sighting would be (new time, new sequence, the repeat counted, the
        content hash kept), so the store's commit moves its age-out index entry to the new
        bucket in the same batch (``SeenIdsStore.extend_batch``: old index key out, new in) and
        a worker rebuilt from the changelog, which replays this very entry, derives the same
        index. Stream time counts the re-arm, as the rebuilt summary's newest mark does."""
        if record_ms > live.stream_ms:
            live.stream_ms = record_ms
        seq = live.next_seq
        if seq is None:
            seq = self.store.summary(partition).next_seq
        live.next_seq = seq + 1
        entry = encode_entry(record_ms, seq, held.repeats + 1, held.content)
        self.table.put(id_bytes, entry, partition)
        mark = (record_ms - record_ms % self.bucket_ms, record_ms)
        if live.staged_oldest is None or mark < live.staged_oldest:
            live.staged_oldest = mark
        self._fold_staged(live)

    @staticmethod
    def _fold_staged(live: _Live) -> None:
        """The oldest id held may be one first seen in the open transaction."""
        mark = live.staged_oldest
        if mark is None or not live.scanned:
            return
        if live.oldest_bucket is None or mark < (live.oldest_bucket, live.oldest_ms or 0):
            live.oldest_bucket, live.oldest_ms = mark

    def age_out(self, record_ms: int, partition: int) -> int:
        """Delete up to ``DEDUPE_EVICTION_BATCH`` ids of ``partition`` that are out of the window
        or over the cap, oldest first; returns how many went."""
        live = self._live.get(partition) or self._state(partition)
        if not self._needs_age_out(partition, live):
            self._check_window(partition, live, record_ms)
            return 0
        summary = self.store.summary(partition)
        start = summary.hint if live.hint is None else live.hint
        deleted = 0
        live.scanned = True
        live.oldest_ms = live.oldest_bucket = None
        for visited, (key, id_bytes) in enumerate(self.store.index(partition, start), 1):
            raw = self.table.lookup(id_bytes)
            entry = None if raw is None else Entry.decode(raw)
            current = entry is not None and entry.seq == int.from_bytes(key[8:16], "big")
            bucket = bucket_of_index_key(key)
            if not current:
                # Superseded or gone. Under an unchanged width the commit's write path deletes
                # this very key; under another (the window or DEDUPE_BUCKET changed since it
                # was written) it cannot name it: delete it by its own key.
                self.store.stage_unindex(partition, key)
            elif entry is not None:
                # Judged by the id's own time under the current width: an entry indexed under a
                # wider bucket (the window was shortened since) must not go by its old bucket's
                # start, which the current width would put out of the window too early.
                bucket = bucket_start(entry.first_seen_ms, self.bucket_ms)
            expired = bucket_expired(
                bucket, self.bucket_ms, live.stream_ms, self.window_ms, self.lateness_ms
            )
            capped = over_cap(self.held(partition), self.cap)
            if current and not (expired or capped):
                assert entry is not None
                live.oldest_bucket, live.oldest_ms = bucket, entry.first_seen_ms
                break
            if current:
                if bucket != bucket_of_index_key(key):
                    self.store.stage_unindex(partition, key)  # indexed under another width
                del self.table[id_bytes]
                live.held_delta -= 1
                deleted += 1
                counter = self.expired if expired else self.evicted
                counter[partition] = counter.get(partition, 0) + 1
            live.hint = key + b"\x00"  # everything up to this key is gone or superseded
            if deleted >= self.batch or visited >= 4 * self.batch:
                live.scanned = False  # more may be due: look again at the next record
                break
        if live.hint is not None:
            self.store.stage_hint(partition, live.hint)
        self._fold_staged(live)
        self._check_window(partition, live, record_ms)
        return deleted

    def _needs_age_out(self, partition: int, live: _Live) -> bool:
        if not live.scanned:
            return True
        if over_cap(self.held(partition), self.cap):
            return True
        return live.oldest_bucket is not None and bucket_expired(
            live.oldest_bucket, self.bucket_ms, live.stream_ms, self.window_ms, self.lateness_ms
        )

    def prefetch(self, partition: int, ids: list[bytes]) -> None:
        """Batch the lookups of ``ids`` (the keys of a batch about to be processed) into one
        multi-get; :meth:`decide` then finds them read."""
        self.store.prefetch(partition, ids)

    def committed_entry(self, partition: int, id_bytes: bytes) -> Entry | None:
        """What the committed state holds for an id (what read_committed readers can see)."""
        raw = self.store.committed_get(partition, id_bytes)
        return None if raw is None else Entry.decode(raw)

    def status(self, partition: int) -> dict[str, int | None]:
        """Figures for ``/stats``: ids held, effective window and its ends, ids aged out."""
        live = self._live.get(partition)
        return {
            "ids_held": self.held(partition),
            "effective_window_ms": self.effective_window_ms(partition),
            "oldest_first_seen_ms": None if live is None else live.oldest_ms,
            "newest_first_seen_ms": None if live is None else live.stream_ms,
            "expired": self.expired.get(partition, 0),
            "evicted": self.evicted.get(partition, 0),
        }

    def effective_window_ms(self, partition: int, record_ms: int | None = None) -> int | None:
        """Record time (default: the partition's stream time) minus the oldest first sighting."""
        live = self._live.get(partition)
        if live is None:
            return None
        return effective_window_ms(
            live.stream_ms if record_ms is None else record_ms, live.oldest_ms
        )

    def _check_window(self, partition: int, live: _Live, record_ms: int) -> None:
        window = effective_window_ms(record_ms, live.oldest_ms)
        if window is None or window >= self.min_window_ms or not self.evicted.get(partition):
            return
        now = time.monotonic()
        if now - self._warned_at.get(partition, -1e9) >= 60:
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

    # -- transaction outcome (registered with the transaction manager after the store) ----------

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        live = self._live.get(partition)
        if live is not None:
            live.held_delta = 0
            live.next_seq = None
            live.hint = None
            live.staged_oldest = None  # committed: the next scan sees it

    def discard_partition(self, partition: int) -> None:
        self._live.pop(partition, None)
