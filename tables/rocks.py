"""RocksDB for the table stores: one partition's database, multi-get, and the keys the store
reserves for its bookkeeping.

Layout: one database per partition, ``<tabledir>/<table>-<partition>.db``, raw bytes keys and
values; the ids in the default column family, the store's bookkeeping in :data:`META_CF`. The
options every partition database is opened with are in ``tables/rocks_options.py``; the
source-offsets record's keys and form in ``tables/source_offsets.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from rocksdict import Options, Rdict, WriteBatch, WriteOptions

from tables.rocks_options import options_for as options_for
from tables.source_offsets import read_source_offsets, read_source_offsets_at

#: Column family for the store's own bookkeeping, apart from the ids (any byte string is a
#: valid messageId, so no key in the default column family could be reserved safely).
META_CF = "dedupe-meta"
#: Key (in :data:`META_CF`) of the changelog offset a partition database holds data through.
OFFSET_KEY = b"changelog-offset"
#: Key (in :data:`META_CF`) present while a bulk restore writes without the write-ahead log
#: (``recovery/restore.py``): a database opened with it lost writes in a crash.
RESTORING_KEY = b"bulk-restore-in-progress"

#: Key (in :data:`META_CF`) of the form the database's keys are in (one byte; absent: 0, the
#: keys as written). A store whose keys have another disk form (``tables/keys.py``) writes it
#: with the database's first write, and reopens one in another form only after a rebuild.
KEY_FORMAT_KEY = b"key-format"

#: Write options of a bulk restore into an empty database, and of the marks around it.
NO_WAL = WriteOptions()
setattr(NO_WAL, "disable_wal", True)  # noqa: B010 (a property; rocksdict's stub says a method)
SYNCED = WriteOptions()
SYNCED.sync = True

#: Level-0 files of the ids that start a compaction (RocksDB's default, in the usual options).
#: A bulk restore compacts nothing while it writes (see :func:`store_options`); at its end every
#: level-0 file starts one (:meth:`PartitionDB.start_compactions`), since its flushes are
#: uncompressed, and it counts as done only once level 0 is empty.
LEVEL0_COMPACTION_FILES = 4


class PartitionDB:
    """One partition's database: the table's keys in the default column family, the store's
    bookkeeping in :data:`META_CF`, and any column families a subclass derives locally."""

    __slots__ = (
        "_format_stored",
        "bulk",
        "db",
        "extra",
        "handles",
        "key_format",
        "meta",
        "meta_handle",
    )

    def __init__(
        self,
        path: Path,
        options: Options,
        family_options: Options,
        extra_cfs: tuple[str, ...] = (),
        key_format: int = 0,
        *,
        bulk: bool = False,
    ) -> None:
        """``bulk``: ``options`` are :attr:`StoreOptions.bulk_ids` (see :meth:`write`)."""
        families = {name: family_options for name in (META_CF, *extra_cfs)}
        if path.exists():
            # RocksDB opens a database only with every family it holds: one an earlier layout
            # kept (and the store's conversion drops) is opened too.
            for name in Rdict.list_cf(str(path)):
                if name != "default":
                    families.setdefault(name, family_options)
        self.db = Rdict(str(path), options, column_families=families)
        self.bulk = bulk
        self.key_format = key_format
        self.meta = self.db.get_column_family(META_CF)
        self.meta_handle = self.db.get_column_family_handle(META_CF)
        self.extra = {name: self.db.get_column_family(name) for name in extra_cfs}
        self.handles = {name: self.db.get_column_family_handle(name) for name in extra_cfs}
        self._format_stored = self.stored_key_format() == key_format

    def stored_key_format(self) -> int:
        raw = self.meta.get(KEY_FORMAT_KEY)
        return 0 if raw is None else raw[0]

    def holds_data(self) -> bool:
        """True when anything was ever written (a changelog offset, or any key)."""
        if self.offset() is not None or self.restoring():
            return True
        it = self.db.iter()
        it.seek_to_first()
        return bool(it.valid())

    def offset(self) -> int | None:
        raw = self.meta.get(OFFSET_KEY)
        return None if raw is None else int.from_bytes(raw, "big")

    def source_offsets(self) -> dict[str, int]:
        return read_source_offsets(self.meta)

    def source_offsets_at(self) -> int | None:
        """The changelog offset of the source-offsets record, when a live commit applied it."""
        return read_source_offsets_at(self.meta)

    def write(self, batch: WriteBatch, offset: int | None, *, wal: bool = True) -> None:
        """Apply ``batch`` and (atomically with it) the changelog offset it brings us to;
        ``wal=False``: without the write-ahead log (a bulk restore, see :meth:`restoring`).

        In a database opened for a bulk restore (``bulk``), the ids' memtable is handed to a
        flush after each write, so reads between writes never meet a memtable being written
        (a read of the vector memtable copies and sorts it first)."""
        if offset is not None:
            batch.put(OFFSET_KEY, offset.to_bytes(8, "big"), self.meta_handle)
        if not self._format_stored:
            batch.put(KEY_FORMAT_KEY, bytes((self.key_format,)), self.meta_handle)
        if wal:
            self.db.write(batch)
        else:
            self.db.write(batch, NO_WAL)
        self._format_stored = True
        if self.bulk:
            self.db.flush(False)

    def start_compactions(self) -> None:
        """Let RocksDB compact the ids again, in its own threads (a bulk restore turned its
        compactions off, :func:`store_options`). In bulk mode a single level-0 file starts
        one: the restore flushed its files uncompressed, and with the usual trigger a restore
        of fewer write batches would leave them so until the worker's own flushes add enough."""
        trigger = 1 if self.bulk else LEVEL0_COMPACTION_FILES
        self.db.set_options(
            {
                "disable_auto_compactions": "false",
                "level0_file_num_compaction_trigger": str(trigger),
            }
        )

    def compacting(self) -> bool:
        """True while level 0 of the ids holds files a compaction will take: in bulk mode any
        (the restore's uncompressed flushes), otherwise enough that writes could stall."""
        files = self.db.property_int_value("rocksdb.num-files-at-level0") or 0
        return files >= (1 if self.bulk else LEVEL0_COMPACTION_FILES)

    def restoring(self) -> bool:
        """True while a bulk restore writes without the write-ahead log: opened in this state,
        the database lost whatever was not flushed yet."""
        return self.meta.get(RESTORING_KEY) is not None

    def mark_restoring(self, on: bool) -> None:
        """Set (before writes without the WAL) or clear (after :meth:`flush`) the mark."""
        batch = WriteBatch(raw_mode=True)
        if on:
            batch.put(RESTORING_KEY, b"1", self.meta_handle)
        else:
            batch.delete(RESTORING_KEY, self.meta_handle)
        self.db.write(batch, SYNCED)

    def flush(self) -> None:
        """Every column family's memtable to disk (waits)."""
        self.db.flush(True)
        self.meta.flush(True)
        for cf in self.extra.values():
            cf.flush(True)

    def close(self) -> None:
        for cf in self.extra.values():
            cf.close()
        self.meta.close()
        self.db.close()


def multi_get(db: Rdict, keys: list[bytes]) -> list[bytes | None]:
    """The values of ``keys`` (None: absent) with one RocksDB MultiGet."""
    found: list[bytes | None] = db.get(cast(Any, keys)) or []
    return found
