"""``seen_ids``: the table of ids this worker has forwarded, as declared on the app, with its
retention. The decisions and the age-out over it are ``tables/seen_ids/``'s.

The table (replicated through its changelog, inside each partition's transaction):

- Key: the ``messageId`` as UTF-8 bytes (at most ``DEDUPE_MAX_MESSAGE_ID_BYTES``); in the local
  databases a canonical UUID takes its 16-byte form (``tables/keys.py``), in the changelog not.
- Value: :class:`tables.window.Entry`: the first-seen time (ms, the record time of the forwarded
  copy), the block of its insertion sequence in its partition (the block's first sequence
  number) and the repeats dropped (counted with ``DEDUPE_COUNT_REPEATS``, else 0); 20 bytes.
- Partitioning: co-partitioned with the input and repartition topics (same partition count, key
  = messageId, Kafka's murmur2 partitioner), so every copy of an id meets the same state.
- Changelog: ``<app id>-seen_ids-changelog``, compacted; an id that ages out is deleted with a
  tombstone in the same transaction, so a worker that rebuilds from the changelog holds exactly
  the ids the live one held. Compaction then bounds the changelog to the ids held.

Retention (how long an id is remembered):

- **Time window** ``DEDUPE_WINDOW`` (28 days): a copy is a repeat when its id was first seen less
  than W before the copy's own record time (``tables.window.judge``). Decisions use record
  times only, never the wall clock, so a replay decides as the first run did.
- **Size cap** ``DEDUPE_MAX_IDS_PER_PARTITION``: past it the oldest ids go first (oldest slot of
  first sighting, then insertion order, to a 256th of the cap or finer), down to 1% under the
  cap, so a traffic spike shortens the window instead of exhausting the disk. The effective
  window (record time minus the oldest held id's first sighting, to a slot) is kept per
  partition and a warning is logged when it falls under ``DEDUPE_MIN_WINDOW``.
- Ids out of the window or over the cap are absent at once (below the partition's cutoff) and
  deleted by a sweep of the ids soon after: ``tables/seen_ids/``.
- Trade-off: ids are kept ``DEDUPE_ALLOWED_LATENESS`` past the window, so a late record (behind
  the partition's newest first sighting by at most that much) is still judged correctly; later
  ones may find their id already gone and be forwarded again.
"""

from __future__ import annotations

from typing import Protocol

import faust

from tables.protocol import changelog_topic
from tables.rocks_options import RocksTuning
from tables.seen_ids.store import SeenIdsStore
from tables.transactional import TransactionalTable
from tables.window import block_size

TABLE_NAME = "seen_ids"


class SeenIdsSettings(Protocol):
    """The settings ``seen_ids`` reads, handed in by the app (``app.settings.Settings`` has
    them all, documented there)."""

    @property
    def app_id(self) -> str: ...
    @property
    def partitions(self) -> int: ...
    @property
    def window(self) -> float: ...
    @property
    def bucket(self) -> float: ...
    @property
    def allowed_lateness(self) -> float: ...
    @property
    def min_window(self) -> float: ...
    @property
    def count_repeats(self) -> bool: ...
    @property
    def max_ids_per_partition(self) -> int: ...
    @property
    def eviction_batch(self) -> int: ...
    @property
    def rocksdb_write_buffer_bytes(self) -> int: ...
    @property
    def rocksdb_memtable_budget_bytes(self) -> int: ...
    @property
    def rocksdb_block_cache_bytes(self) -> int: ...
    @property
    def rocksdb_compression(self) -> str: ...
    @property
    def rocksdb_block_bytes(self) -> int: ...


def changelog_topic_name(settings: SeenIdsSettings) -> str:
    """Faust's name for the table's changelog topic."""
    return changelog_topic(settings.app_id, TABLE_NAME)


def rocks_tuning(settings: SeenIdsSettings) -> RocksTuning:
    """The store's RocksDB knobs from the ``DEDUPE_ROCKSDB_*`` settings."""
    return RocksTuning(
        write_buffer_bytes=settings.rocksdb_write_buffer_bytes,
        memtable_budget_bytes=settings.rocksdb_memtable_budget_bytes,
        block_cache_bytes=settings.rocksdb_block_cache_bytes,
        compression=settings.rocksdb_compression,
        block_bytes=settings.rocksdb_block_bytes,
    )


def declare_seen_ids(app: faust.App, settings: SeenIdsSettings) -> TransactionalTable:
    """Declare the table on ``app`` (one per app)."""
    bucket_ms = round(settings.bucket * 1000)
    block = block_size(settings.max_ids_per_partition)
    tuning = rocks_tuning(settings)
    table = TransactionalTable(
        app,
        name=TABLE_NAME,
        partitions=settings.partitions,
        beacon=app.tables.beacon,
        store_factory=lambda *a, **kw: SeenIdsStore(
            *a, bucket_ms=bucket_ms, block=block, tuning=tuning, **kw
        ),
        help="messageId -> first-seen time and insertion sequence of its one forwarded copy",
    )
    app.tables.add(table)
    return table
