"""RocksDB options of the table stores, chosen so that memory stays bounded however many ids and
partitions a worker holds (instead of Faust's 2 GiB block cache per partition):

- one block cache shared by all partitions of the table, holding data, index and filter blocks;
- one write-buffer manager shared by all partitions: the memtables of every partition database
  together stay near its budget (RocksDB flushes one early when they reach it), so memtable
  memory does not grow with the number of partitions held;
- Zstandard compression of every block by default (about 40% fewer bytes per id than Snappy),
  in 16 KiB data blocks (zstd finds more to share in a larger block);
- bloom filters of 10 bits/key on the ids (lookups of new ids mostly miss), *partitioned* with
  a two-level index in 4 KiB blocks whose top levels stay pinned in the cache: a cache miss
  reads one small filter or index partition, not a whole-file filter block (about 1.5 MB per
  SST file), which at tens of millions of ids made every lookup of a new id re-read megabytes
  (``bench/results-scale.md``).
"""

from __future__ import annotations

from dataclasses import dataclass

from rocksdict import (
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    DBCompressionType,
    MemtableFactory,
    Options,
    WriteBufferManager,
)

BLOOM_BITS_PER_KEY = 10
#: Memtable bloom filter of the ids' column family, as a share of its write buffer (64 MiB:
#: 1.3 MiB, some 20 bits per id a full memtable holds).
MEMTABLE_BLOOM_RATIO = 0.02
#: ``RocksTuning.compression`` -> RocksDB's compression type.
COMPRESSION = {
    "zstd": DBCompressionType.zstd,
    "lz4": DBCompressionType.lz4,
    "snappy": DBCompressionType.snappy,
    "none": DBCompressionType.none,
}
#: Memtables of the ids a bulk restore may fill before it waits for their flushes: the one it
#: writes and those RocksDB's threads are still sorting and writing to disk.
BULK_MEMTABLES = 6
#: Levels of each database (RocksDB's default).
LEVELS = 7
#: Threads the compaction at the end of a bulk restore splits into, by key range (nothing else
#: writes the partition meanwhile). That compaction is on the takeover's path, so splitting it
#: shortens the restore; more threads than the worker has cores only contend with the restore
#: of the next partition (``make bench-recovery`` measures it: bench/results-recovery.md).
BULK_SUBCOMPACTIONS = 2
#: Keys between the full keys a data block stores for its binary search (RocksDB's
#: ``block_restart_interval``, 16 by default); the keys between are stored as the bytes they
#: do not share with the one before. Random ids share only a few leading bytes, so a full key
#: is ~3 bytes more than a delta, plus a 4-byte offset: 32 saves ~0.2 bytes per id; a lookup
#: then scans up to 32 keys of a block, not 16, which was no slower in the same comparison
#: (6.25M random UUIDs in one database, the worker's other options).
BLOCK_RESTART_INTERVAL = 32
#: Size of the partitions of filters and index (RocksDB's ``metadata_block_size``).
METADATA_BLOCK_BYTES = 4096


@dataclass(frozen=True)
class RocksTuning:
    """The RocksDB knobs of one table store (settings ``DEDUPE_ROCKSDB_*``)."""

    #: Most bytes of one memtable (per partition database and column family).
    write_buffer_bytes: int = 64 * 1024 * 1024
    #: All memtables of all partitions of the table together (one write-buffer manager).
    memtable_budget_bytes: int = 256 * 1024 * 1024
    #: Block cache shared by all partitions of the table (data, index and filter blocks).
    block_cache_bytes: int = 128 * 1024 * 1024
    #: Compression of the blocks: zstd, lz4, snappy or none.
    compression: str = "zstd"
    #: Size of a data block before compression.
    block_bytes: int = 16 * 1024

    @property
    def memtable_bytes(self) -> int:
        """Most bytes of one memtable, within the budget of them all."""
        return min(self.write_buffer_bytes, self.memtable_budget_bytes)


@dataclass(frozen=True)
class StoreOptions:
    """Options of every partition database of one store, sharing one cache and one budget."""

    #: The database and its ids (the default column family).
    ids: Options
    #: The same while a bulk restore fills an empty database (:data:`PartitionDB.bulk`): the
    #: ids go into *vector* memtables, appended as they come and sorted once, by the flush in
    #: RocksDB's own thread. A skiplist memtable sorts each key as it is inserted, in the
    #: writer's thread with the GIL held, costly for random UUIDs.
    bulk_ids: Options
    #: The other column family (the bookkeeping).
    families: Options
    cache: Cache


def store_options(tuning: RocksTuning) -> StoreOptions:
    cache = Cache(tuning.block_cache_bytes)
    # No stall: past the budget RocksDB flushes memtables early instead of blocking writers.
    budget = WriteBufferManager(tuning.memtable_budget_bytes, False)
    ids, bulk_ids = _ids_options(tuning, cache, budget), _ids_options(tuning, cache, budget)
    bulk_ids.set_memtable_factory(MemtableFactory.vector())
    bulk_ids.set_allow_concurrent_memtable_write(False)  # the vector memtable cannot
    bulk_ids.set_max_write_buffer_number(BULK_MEMTABLES)
    # Nothing reads a bulk restore's memtable (each is flushed as it is written), so a bloom
    # filter over it would be written for nothing.
    bulk_ids.set_memtable_whole_key_filtering(False)
    bulk_ids.set_memtable_prefix_bloom_ratio(0.0)
    # No compaction while the restore writes: random ids overlap every level-0 file, so each
    # compaction out of level 0 rewrites every id below it, and with compactions as usual a
    # partition's ids were rewritten again and again as it grew, most of the compaction
    # thread's CPU spent on ids it wrote before. Level 0 is compacted once, when the restore
    # ends (:meth:`PartitionDB.start_compactions`, :meth:`PartitionDB.compacting`).
    # RocksDB does not slow writes down for level-0 files while compactions are off.
    bulk_ids.set_disable_auto_compactions(True)
    bulk_ids.set_max_subcompactions(BULK_SUBCOMPACTIONS)
    # Its flushes go to level 0 uncompressed: zstd is a large share of RocksDB's flush
    # thread, which shares the worker's cores with the restore, and compaction compresses what
    # it merges below level 0 (with the usual options after the restore, too). Only in bulk
    # mode: a worker's steady flushes stay compressed, since its ids stay in level 0 longer
    # and would take more disk uncompressed (bench/results-scale.md has the bytes per id).
    compression = COMPRESSION[tuning.compression]
    bulk_ids.set_num_levels(LEVELS)
    bulk_ids.set_compression_per_level([DBCompressionType.none()] + [compression()] * (LEVELS - 1))
    # The bookkeeping holds a few keys per slot of the window, read by scans: no filter.
    families = family_options(tuning, cache, budget, bloom=False)
    return StoreOptions(ids, bulk_ids, families, cache)


def options_for(tuning: RocksTuning) -> tuple[Options, Options, Cache]:
    """Options for every partition database of one store outside bulk restores: those of the
    ids (the default column family), those of the other column families, their cache."""
    options = store_options(tuning)
    return options.ids, options.families, options.cache


def _ids_options(tuning: RocksTuning, cache: Cache, budget: WriteBufferManager) -> Options:
    ids = family_options(tuning, cache, budget)
    # Most lookups are of ids not held (every first sighting): a bloom filter over the whole
    # keys of the memtable answers those without walking its skiplist, which grows to hundreds
    # of thousands of ids per partition before a flush.
    ids.set_memtable_whole_key_filtering(True)
    ids.set_memtable_prefix_bloom_ratio(MEMTABLE_BLOOM_RATIO)
    return ids


def family_options(
    tuning: RocksTuning, cache: Cache, budget: WriteBufferManager, *, bloom: bool = True
) -> Options:
    write_buffer_bytes = tuning.memtable_bytes
    opts = Options(raw_mode=True)
    opts.set_write_buffer_size(write_buffer_bytes)
    opts.set_write_buffer_manager(budget)
    # The bookkeeping column family takes a few bytes per commit and would never fill its
    # memtable, so RocksDB would keep every write-ahead log file for it: cap the WAL, which
    # makes RocksDB flush the column families that hold old logs.
    opts.set_max_total_wal_size(4 * write_buffer_bytes)
    opts.set_max_log_file_size(16 * 1024 * 1024)
    opts.set_keep_log_file_num(3)
    opts.create_if_missing(True)
    opts.create_missing_column_families(True)
    # Zstandard (the default): 63.3 bytes per id on disk (ids and the age-out index of that
    # layout, after compaction) against 103.4 with RocksDB's default Snappy (1M uuid-shaped
    # ids, keys as text, 4 KiB blocks). Blocks are compressed at flush and compaction, in
    # RocksDB's own threads, and decompressed only on block cache misses.
    opts.set_compression_type(COMPRESSION[tuning.compression]())
    table = BlockBasedOptions()
    # 16 KiB blocks (the default): 51.9 bytes per id against 54.7 with RocksDB's 4 KiB (1M
    # uuid-shaped ids over 8 partitions, keys in their 16-byte form; bench/results-scale.md).
    table.set_block_size(tuning.block_bytes)
    table.set_block_restart_interval(BLOCK_RESTART_INTERVAL)
    if bloom:
        table.set_bloom_filter(BLOOM_BITS_PER_KEY, False)
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_metadata_block_size(METADATA_BLOCK_BYTES)
    table.set_pin_top_level_index_and_filter(True)
    opts.set_block_based_table_factory(table)
    return opts
