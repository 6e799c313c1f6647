"""``SeenIds``: the dedup decision over the ``seen_ids`` table (declared, with its retention, in
``tables/seen_ids/table.py``); age-out, which decides when an id is no longer held, is
``tables/age_out.py``."""

from __future__ import annotations

from collections.abc import Sequence

from tables.age_out import AgeOut, PartitionState, load_state
from tables.seen_ids.store import SeenIdsStore
from tables.seen_ids.table import SeenIdsSettings
from tables.transactional import TransactionalTable
from tables.window import (
    CONTENT,
    REPEATS,
    Entry,
    Verdict,
    effective_window_ms,
    encode_entry,
    judge_held,
    rearms,
    repeated_entry,
    sighting_of,
)

# Module constants: read per record, faster than the enum's class attributes.
_FIRST, _REPEAT, _REUSED = Verdict.FIRST, Verdict.REPEAT, Verdict.REUSED


class SeenIds:
    """The dedup decision over ``seen_ids``, and age-out after it, for the record processed."""

    def __init__(self, table: TransactionalTable, settings: SeenIdsSettings) -> None:
        self.table = table
        self.aging = AgeOut(table, settings)
        self.window_ms = self.aging.window_ms
        self.slot_ms, self.block = self.aging.slot_ms, self.aging.block
        self.cap, self.min_window_ms = self.aging.cap, self.aging.min_window_ms
        #: DEDUPE_COUNT_REPEATS: a repeat writes its entry again with the count one up; off, a
        #: repeat writes nothing (nothing a later decision or a restore reads changes with it).
        self.count_repeats = settings.count_repeats
        self.evicted, self.expired = self.aging.evicted, self.aging.expired
        self._live: dict[int, PartitionState] = {}
        #: The store's generations (``SeenIdsStore.generations``), once a partition was read.
        self._generations: dict[int, int] = {}

    @property
    def store(self) -> SeenIdsStore:
        return self.aging.store

    def _state(self, partition: int) -> PartitionState:
        """The partition's live state, read again from the committed state when the store's
        ids changed other than by this worker's commits (restored, written as a standby, or
        the partition closed and opened again): after a rebalance it may hold what another
        worker wrote."""
        store = self.store
        self._generations = store.generations
        live = self._live.get(partition)
        if live is None or live.generation != store.generations.get(partition, 0):
            if store.block != self.block:
                raise RuntimeError(
                    f"seen_ids: the store counts blocks of {store.block} sequence numbers, the "
                    f"decision {self.block}: both come from DEDUPE_MAX_IDS_PER_PARTITION "
                    "(tables.window.block_size) and must be built from the same settings"
                )
            live = self._live[partition] = load_state(store, partition)
        return live

    def held(self, partition: int) -> int:
        """Ids on disk in ``partition`` (those below the cutoff the sweep has not deleted yet
        too), counting the open transaction."""
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
        sighting is stored (with ``content``, its hash, when given), a repeat counted (only
        with ``count_repeats``) and, with ``last_seen``, its clock re-armed, a reuse left as it
        is. An entry first seen before the cutoff is absent. ``partition``: the record's
        (passed in, never read from the table's context). Age-out is the caller's next step
        (:meth:`age_out`)."""
        return self.decide_span((id_bytes,), (record_ms,), partition, last_seen, content, False)[0]

    def decide_span(
        self,
        ids: Sequence[bytes],
        times: Sequence[int],
        partition: int,
        last_seen: bool = False,
        content: bytes = b"",
        age: bool = True,
    ) -> list[Verdict]:
        """:meth:`decide` each of ``ids`` (records of ``partition`` in offset order, at
        ``times``, all with ``content``) and, with ``age``, :meth:`age_out` after each, as a
        record at a time would: the verdicts, in order. The dedup loop's span of records
        decided by id, in one call: the decision runs here for every record, without a call
        per record for it or for age-out's check."""
        table = self.table
        lookup, put = table.lookup, table.put
        generations = self._generations
        live = self._live.get(partition)
        if live is None or live.generation != generations.get(partition, 0):
            live = self._state(partition)
        slot_ms, block, window_ms = self.slot_ms, self.block, self.window_ms
        count_repeats = self.count_repeats
        age_run = self.aging.run
        counts = live.counts
        delta = counts.delta
        verdicts: list[Verdict] = []
        for id_bytes, record_ms in zip(ids, times, strict=True):
            raw = lookup(id_bytes, partition)
            if raw is not None:
                # The held entry's fields read from its bytes: no Entry per held id (the
                # decision of every repeat).
                old_ms, old_seq = sighting_of(raw)
                old_rank = (old_ms - old_ms % slot_ms, old_seq // block)
                if old_rank >= live.cutoff:
                    held_content = raw[CONTENT]
                    verdict = judge_held(old_ms, held_content, record_ms, window_ms, content)
                    if verdict is _REPEAT:
                        if not (last_seen and rearms(old_ms, record_ms, last_seen)):
                            if count_repeats:
                                put(id_bytes, repeated_entry(raw), partition)
                            verdicts.append(_REPEAT)
                            if age:
                                age_run(partition, live, record_ms)
                            continue
                        # Re-armed: stored again with the record's time, still a repeat.
                        repeats = int.from_bytes(raw[REPEATS], "big") + 1 if count_repeats else 0
                        stored_content = held_content
                    elif verdict is _REUSED:
                        verdicts.append(_REUSED)
                        if age:
                            age_run(partition, live, record_ms)
                        continue
                    else:
                        repeats, stored_content = 0, content
                else:
                    live.below -= 1
                    repeats, stored_content = 0, content
                    verdict = _FIRST
                counts.add(old_rank, -1)
            else:
                live.held_delta += 1
                repeats, stored_content = 0, content
                verdict = _FIRST
            # Stream time is the newest first sighting (or re-arm) held: derived from the state
            # alone, so a worker restarted from the changelog ages out exactly as the live one
            # did.
            if record_ms > live.stream_ms:
                live.stream_ms = record_ms
            seq = live.next_seq
            if seq is None:
                seq = self.store.summary(partition).next_seq
            live.next_seq = seq + 1
            stored_seq = seq - seq % block  # tables.window.block_start, inline
            put(id_bytes, encode_entry(record_ms, stored_seq, repeats, stored_content), partition)
            rank = (record_ms - record_ms % slot_ms, seq // block)
            delta[rank] = delta.get(rank, 0) + 1  # counts.add(rank, 1), inline
            counts.delta_total += 1
            if rank < live.cutoff:
                live.below += 1  # later than the allowed lateness: held only until the sweep
            verdicts.append(verdict)
            if age:
                age_run(partition, live, record_ms)
        return verdicts

    def age_out(self, record_ms: int, partition: int) -> int:
        """Age out after the record's decision (``tables/age_out.py``): how many ids went."""
        # decide() ran for this record and read the partition's state again if it had to.
        live = self._live.get(partition) or self._state(partition)
        return self.aging.run(partition, live, record_ms)

    def prefetch(self, partition: int, ids: list[bytes]) -> None:
        """Batch the lookups of ``ids`` (the keys of a batch about to be processed) into one
        multi-get; :meth:`decide` then finds them read."""
        self.store.prefetch(partition, ids)

    def committed_entry(self, partition: int, id_bytes: bytes) -> Entry | None:
        """What the committed state holds for an id (what read_committed readers can see); an
        entry below the committed cutoff is absent."""
        raw = self.store.committed_get(partition, id_bytes)
        if raw is None or self.aging.rank_of(raw) < self.store.summary(partition).cutoff:
            return None
        return Entry.decode(raw)

    def oldest_first_seen_ms(self, partition: int) -> int | None:
        """The start of the oldest slot that holds an id at or after the cutoff: the oldest first
        sighting held, to a slot's width (None: no id held)."""
        live = self._state(partition)
        return live.counts.oldest(live.cutoff)

    def status(self, partition: int) -> dict[str, int | None]:
        """Figures for ``/stats``: ids held, effective window and its ends, ids aged out."""
        live = self._live.get(partition)
        return {
            "ids_held": self.held(partition) - (live.below if live else 0),
            "effective_window_ms": self.effective_window_ms(partition),
            "oldest_first_seen_ms": None if live is None else self.oldest_first_seen_ms(partition),
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
            live.stream_ms if record_ms is None else record_ms,
            self.oldest_first_seen_ms(partition),
        )

    # -- transaction outcome (registered with the transaction manager after the store) ----------

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        live = self._live.get(partition)
        if live is not None:
            # The store applied the same changes to its committed counts and summary.
            live.counts.delta.clear()
            live.counts.delta_total = 0
            live.held_delta = 0
            # next_seq stays: entries keep only their block's start, so the summary's next
            # sequence is the next block's start (``tables/seen_ids/store.py``); read after
            # every commit, it would start a block per commit.
            live.moved = False

    def discard_partition(self, partition: int) -> None:
        self._live.pop(partition, None)
