"""The RocksDB tuning section of the worker's settings (``tables.rocks_options.RocksTuning``).

A base class of :class:`app.settings.Settings`, which validates it with every other section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envsettings import EnvSettings, setting


@dataclass(frozen=True)
class RocksDBSettings(EnvSettings):
    """RocksDB tuning settings of the dedup worker (a section of :class:`app.settings.Settings`)."""

    SECTION: ClassVar[str] = "RocksDB tuning"

    rocksdb_write_buffer_bytes: int = setting(
        64 * 1024 * 1024,
        "DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES",
        "RocksDB memtable size per partition database (column family); smaller flushes sooner.",
        within=(64 * 2**10, 2**31),
    )
    rocksdb_memtable_budget_bytes: int = setting(
        256 * 1024 * 1024,
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES",
        "RocksDB memtables of all partitions together (one write-buffer manager): past it, "
        "memtables are flushed early, so memory does not grow with the partitions held.",
        within=(2**20, 2**36),
    )
    rocksdb_block_cache_bytes: int = setting(
        128 * 1024 * 1024,
        "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES",
        "RocksDB block cache shared by all partitions (data, index and filter blocks); "
        "about 2 bytes per id held keeps every filter and index partition cached.",
        within=(2**20, 2**36),
    )
    rocksdb_compression: str = setting(
        "zstd",
        "DEDUPE_ROCKSDB_COMPRESSION",
        "Compression of the state's RocksDB blocks: zstd (bench/results-scale.md gives the bytes "
        "per UUID id held), lz4, snappy (RocksDB's default) or none. Applies to files written "
        "from then on; older files keep theirs. (A bulk restore writes level 0 uncompressed; "
        "compaction compresses it.)",
        one_of=("zstd", "lz4", "snappy", "none"),
    )
    rocksdb_block_bytes: int = setting(
        16 * 1024,
        "DEDUPE_ROCKSDB_BLOCK_BYTES",
        "Size of the state's RocksDB data blocks (before compression). Larger blocks compress "
        "better (16 KiB: about 3 bytes per id fewer than RocksDB's 4 KiB) and a lookup of a "
        "held id that misses the block cache reads and decompresses one whole block. Applies "
        "to files written from then on.",
        within=(1024, 1024 * 1024),
    )
