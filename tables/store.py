"""A RocksDB table store (rocksdict) whose writes wait for their Kafka transaction.

Faust's own RocksDB store writes ``table[k] = v`` to disk at once, so after a hard kill it keeps
ids whose transaction aborted, and their replayed events are then dropped as duplicates: lost
data. This store keeps each partition's writes *staged* in memory until the partition's
transaction commits (:meth:`commit_partition`), then writes them together with the changelog
offset they correspond to in one atomic RocksDB write batch. A failed transaction drops them
(:meth:`discard_partition`). Invariant: each partition's database holds exactly a prefix of the
committed changelog, up to the offset stored under :attr:`offset_key`; the recovery restores the
rest (``read_committed``) on assignment.

Reads during processing see the committed data plus the partition's own staged writes
(read-your-writes inside a transaction). Committed values a transaction read (a batch's keys in
one multi-get, :meth:`TransactionalStore.prefetch`) are kept until the partition's next write or
discard, so the commit's derived-data upkeep does not read them again.

One class, in the order of its concerns: the keys' disk form (as written here;
``tables.seen_ids.store.SeenIdsStore`` overrides it with the compact forms of ``tables/keys.py``),
the partitions, the transactions, Faust's mapping interface (``get_in`` and ``stage`` are on the
hot path), and the writes of restored changelog records (Faust's recovery and the bulk restore
of ``recovery/restore.py``). The RocksDB side (one database per partition, options that keep
memory bounded) is in ``tables/rocks.py``, ``tables/rocks_options.py`` and
``tables/partitions.py``; the staged writes and read cache in ``tables/staging.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, cast

from faust.types import TP, EventT
from rocksdict import Rdict, WriteBatch

from adapters.faust_privates import StoreShim
from tables.partitions import PartitionSet
from tables.rocks import PartitionDB
from tables.rocks_options import RocksTuning, store_options
from tables.source_offsets import SOURCE_OFFSETS_KEY, check_changelog_version, put_source_offsets
from tables.staging import Staging
from tables.written_keys import WrittenKeys

log = logging.getLogger(__name__)


class TransactionalStore(StoreShim):
    """Per-partition RocksDB databases with writes staged per transaction (raw bytes only).

    Subclasses may keep local, derived column families (``extra_cfs``) in step with the table's
    keys by overriding :meth:`extend_batch`; it runs for live commits and for changelog
    recovery alike, so derived data is the same however the keys arrived.
    """

    extra_cfs: tuple[str, ...] = ()

    # -- the keys' disk form: as written (a store with a compact form overrides these) ---------

    #: The disk form of the keys (:data:`tables.rocks.KEY_FORMAT_KEY`); 0: as written.
    key_format = 0

    @staticmethod
    def disk_key(key: bytes) -> bytes:
        """``key`` as the databases hold it (subclasses with a compact form override both)."""
        return key

    @staticmethod
    def disk_keys(keys: list[bytes]) -> list[bytes]:
        """:meth:`disk_key` of each of ``keys`` (subclasses may do it in whole-list steps)."""
        return keys

    @staticmethod
    def written_key(raw: bytes) -> bytes:
        """A key read from a database, as it was written (the inverse of :meth:`disk_key`)."""
        return raw

    @staticmethod
    def convert_keys(pdb: PartitionDB, found: int, name: str) -> int | None:
        """Convert a database of key form ``found`` in place, and how many keys that rewrote
        (None: it cannot; the database is rebuilt from the changelog)."""
        return None

    def __init__(
        self,
        url: Any,
        app: Any,
        table: Any,
        *,
        partition_of: Callable[[], int],
        tuning: RocksTuning | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(url, app, table, **kwargs)
        self._partition_of = partition_of
        self._staging = Staging(None if self.key_format == 0 else self.disk_keys)
        self._store_stopped = False
        #: Partition -> the keys its restore into an empty database wrote so far (begin_bulk to
        #: end_bulk): the index upkeep reads back only those (``tables/written_keys.py``).
        self._written: dict[int, WrittenKeys] = {}
        self.tuning = tuning = tuning or RocksTuning()
        options = store_options(tuning)
        self._cache = options.cache
        self.directory = Path(app.conf.tabledir)
        self._partitions = PartitionSet(
            self.directory,
            self.table_name,
            options.ids,
            options.families,
            self.extra_cfs,
            self.key_format,
            bulk_options=options.bulk_ids,
            convert=self.convert_keys,
        )

    # -- partitions ----------------------------------------------------------------------------

    def partition_path(self, partition: int) -> Path:
        return self._partitions.path(partition)

    def partition_db(self, partition: int) -> PartitionDB:
        """The database of ``partition``, opened on first use (``tables/partitions.py``)."""
        return self._partitions.get(partition)

    def db(self, partition: int) -> Rdict:
        """The ids of ``partition`` (committed state)."""
        return self._partitions.get(partition).db

    def close_partition(self, partition: int) -> None:
        self._staging.discard(partition)
        self._written.pop(partition, None)
        self._partitions.close(partition)

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP], generation_id: int = 0
    ) -> None:
        """Close the databases of partitions this worker no longer holds (active or standby)."""
        keep = {tp.partition for tp in assigned}
        for partition in self._partitions.held():
            if partition not in keep:
                self.close_partition(partition)

    async def on_recovery_completed(self, active_tps: set[TP], standby_tps: set[TP]) -> None:
        pass

    async def need_active_standby_for(self, tp: TP) -> bool:
        return True

    async def on_stop(self) -> None:
        self._store_stopped = True
        for partition, count in self._staging.unfinished():
            if count:
                # The transaction manager commits before Faust stops the tables, so this is a
                # transaction that did not finish. If it commits after all, recovery replays it:
                # commit_partition never records an offset without its writes.
                log.warning(
                    "partition %d: closing with %d staged writes of an unfinished transaction",
                    partition,
                    count,
                )
        for partition in self._partitions.held():
            self.close_partition(partition)

    def reset_state(self) -> None:
        """Remove every local database (state is rebuilt from the changelog)."""
        for partition in self._partitions.held():
            self._staging.discard(partition)
        self._partitions.remove_all()

    async def backup_partition(
        self, tp: TP | int, flush: bool = True, purge: bool = False, keep: int = 1
    ) -> None:
        raise NotImplementedError("the changelog topic is the backup of this store")

    def restore_backup(self, tp: TP | int, latest: bool = True, backup_id: int = 0) -> None:
        raise NotImplementedError("the changelog topic is the backup of this store")

    # -- transactions --------------------------------------------------------------------------

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        """The transaction of ``partition`` committed: apply its staged writes atomically.

        ``changelog_offset`` is the offset of the transaction's last changelog record. The
        commit marker follows it at ``changelog_offset + 1`` (only this partition's
        transactional producer writes that changelog partition, and a fenced one cannot), so
        the store records that it holds the changelog *through the marker*: a recovery then
        finds nothing left to read.
        """
        staged = self._staging.take(partition)
        if not staged and changelog_offset is None:
            self._staging.forget_reads(partition)
            return
        if self._store_stopped or (staged is None and changelog_offset is not None):
            self._staging.forget_reads(partition)
            # The writes are gone (the store stopped, or the partition was closed meanwhile):
            # recording the offset alone would make recovery skip them for good. Leave the
            # database at its older offset: recovery replays the committed changelog records.
            log.warning(
                "partition %d: a committed transaction's writes are no longer staged here "
                "(store %s); they will be recovered from the changelog",
                partition,
                "stopped" if self._store_stopped else "partition closed",
            )
            return
        through = None if changelog_offset is None else changelog_offset + 1
        # The source-offsets record is the transaction's last record in this changelog, so
        # ``changelog_offset`` is its offset: kept to confirm the commit later, if need be.
        self.write_partition(
            partition, list((staged or {}).items()), through, source_offsets_at=changelog_offset
        )

    def write_partition(
        self,
        partition: int,
        writes: list[tuple[bytes, bytes | None]],
        offset: int | None,
        *,
        wal: bool = True,
        source_offsets_at: int | None = None,
    ) -> None:
        """Write ``writes`` (value None: delete), in order, with the changelog ``offset``, in one
        atomic batch together with whatever :meth:`extend_batch` derives from them.
        ``source_offsets_at``: the changelog offset of a source-offsets record among ``writes``
        applied by a live commit (None: restored from the changelog, so committed)."""
        pdb = self.partition_db(partition)
        batch = WriteBatch(raw_mode=True)
        ids = [(k, v) for k, v in writes if k != SOURCE_OFFSETS_KEY]
        if len(ids) < len(writes):
            for key, value in writes:
                if key == SOURCE_OFFSETS_KEY and value is not None:  # bookkeeping, not an id
                    # Before anything of this write: the record, the transaction's last, of a
                    # changelog format this worker does not read is never applied, and the
                    # refusal stops the worker (tables/formats.py).
                    check_changelog_version(
                        value, f"the {self.table_name} changelog's partition {partition}"
                    )
                    put_source_offsets(batch, pdb.meta_handle, value, source_offsets_at)
        self.extend_batch(partition, pdb, batch, ids)
        self._staging.forget_reads(partition)  # committed values change with this write
        pdb.write(batch, offset, wal=wal)

    def extend_batch(
        self,
        partition: int,
        pdb: PartitionDB,
        batch: WriteBatch,
        writes: list[tuple[bytes, bytes | None]],
    ) -> None:
        """Put ``writes`` into ``batch``; subclasses add their derived writes."""
        disk_key = self.disk_key
        for key, value in writes:
            if value is None:
                batch.delete(disk_key(key))
            else:
                batch.put(disk_key(key), value)

    def changelog_records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        """The open transaction's writes to ``partition``, one per key: its changelog records
        (the source-offsets record is sent by the transaction layer itself)."""
        return self._staging.changelog_records(partition)

    def stage_source_offsets(self, partition: int, value: bytes) -> None:
        """Stage the transaction's source-offsets record (applied with its other writes)."""
        self._staging.stage(partition, SOURCE_OFFSETS_KEY, value)

    def source_offsets(self, partition: int) -> dict[str, int]:
        """Topic -> next offset, as of the last transaction this database holds.

        Written in the same transaction as the output and the group's offsets, so it is as
        authoritative as the group's committed offsets, and it survives where those read back
        stale (after a single broker's kill -9; fault test F7)."""
        return self.partition_db(partition).source_offsets()

    def source_offsets_at(self, partition: int) -> int | None:
        """The changelog offset of the record :meth:`source_offsets` came from, when a live
        commit applied it (None: restored from the changelog, where it is committed)."""
        return self.partition_db(partition).source_offsets_at()

    def rebuild_partition(self, partition: int) -> None:
        """Delete the database of ``partition``: the next recovery rebuilds it from the
        changelog (for a database that holds a transaction the changelog does not)."""
        self.close_partition(partition)
        self._partitions.remove(partition)

    def discard_partition(self, partition: int) -> None:
        """The transaction of ``partition`` did not commit: forget its staged writes."""
        self._staging.discard(partition)

    def prefetch(self, partition: int, keys: list[bytes]) -> None:
        """Read the committed values of ``keys`` with one multi-get, for the lookups of a batch
        about to be processed (:meth:`get_in`) and for the index upkeep at its commit
        (:meth:`committed`): one RocksDB call instead of one per record, twice."""
        self._staging.prefetch(partition, keys, lambda: self.db(partition))

    def committed(
        self, partition: int, keys: list[bytes]
    ) -> tuple[list[bytes], list[bytes | None]]:
        """The disk form and the committed value of each of ``keys`` (one multi-get at most):
        what the index upkeep at a commit needs. Pass every key about to be written: during a
        restore into an empty database (:meth:`begin_bulk`) they are recorded as written, and
        a key no earlier batch of it wrote is known to be absent without a read."""
        return self._staging.committed(
            partition, keys, lambda: self.db(partition), self._written.get(partition)
        )

    def staged_count(self, partition: int) -> int:
        return self._staging.count(partition)

    # -- Faust's mapping interface: the partition of the record being processed, over its
    # open transaction's staged writes and the committed state -------------------------------

    def get_raw(self, key: bytes) -> bytes | None:
        return self.get_in(self._partition_of(), key)

    def get_in(self, partition: int, key: bytes) -> bytes | None:
        """``key``'s value in ``partition``: this transaction's staged write, else the
        committed value (read once per transaction, or prefetched)."""
        return self._staging.value(partition, key, self.committed_get)

    def committed_get(self, partition: int, key: bytes) -> bytes | None:
        """``key``'s committed value in ``partition``, read from the database now."""
        value: bytes | None = self.db(partition).get(self.disk_key(key))
        return value

    def set_raw(self, key: bytes, value: bytes | None) -> None:
        self.stage(self._partition_of(), key, value)

    def del_raw(self, key: bytes) -> None:
        self.stage(self._partition_of(), key, None)

    def stage(self, partition: int, key: bytes, value: bytes | None) -> None:
        """Stage a write (None: delete) in ``partition``'s open transaction."""
        self._staging.stage(partition, key, value)

    def contains_raw(self, key: bytes) -> bool:
        return self.get_raw(key) is not None

    def _committed_items(self) -> Iterator[tuple[bytes, bytes]]:
        written_key = self.written_key
        for pdb in self._partitions.opened():
            for key, value in pdb.db.items():
                yield written_key(cast(bytes, key)), cast(bytes, value)

    def iterkeys_raw(self) -> Iterator[bytes]:
        return (k for k, _ in self._committed_items())

    def itervalues_raw(self) -> Iterator[bytes]:
        return (v for _, v in self._committed_items())

    def iteritems_raw(self) -> Iterator[tuple[bytes, bytes]]:
        return self._committed_items()

    def size_raw(self) -> int:
        return sum(self.approximate_keys(p) for p in self._partitions.held())

    def approximate_keys(self, partition: int) -> int:
        """RocksDB's estimate of the keys held by ``partition`` (committed state)."""
        return max(int(self.db(partition).property_int_value("rocksdb.estimate-num-keys") or 0), 0)

    def clear_raw(self) -> None:
        raise NotImplementedError("a transactional table cannot be cleared; wipe the data dir")

    # -- Faust's recovery ----------------------------------------------------------------------

    def persisted_offset(self, tp: TP) -> int | None:
        return self.partition_db(tp.partition).offset()

    def set_persisted_offset(self, tp: TP, offset: int) -> None:
        self.partition_db(tp.partition).write(WriteBatch(raw_mode=True), offset)

    # -- bulk restore (recovery/restore.py) ------------------------------------------------------

    def restored_offset(self, partition: int) -> int | None:
        return self.partition_db(partition).offset()

    def begin_bulk(self, partition: int, records: int) -> bool:
        """True (and the database is marked as being restored) when it holds nothing yet: the
        restore's ``records`` (changelog offsets) then skip the write-ahead log, read back only
        the keys they may have written themselves (``tables/written_keys.py``), and go into the
        database opened again with the bulk options (``tables.rocks_options.StoreOptions.bulk_ids``)
        until RocksDB has compacted what it wrote, after :meth:`end_bulk` (:meth:`compacting`
        says when)."""
        if self.partition_db(partition).restoring():
            # A restore stopped by a rebalance, going on in the same open database (one opened
            # marked is emptied first, ``tables/partitions.py``), with the keys it recorded as
            # written so far; without them (none recorded) every key is read back.
            return True
        if self.partition_db(partition).offset() is not None:
            return False
        self._partitions.reopen(partition, bulk=True).mark_restoring(True)
        self._written[partition] = WrittenKeys(records)
        return True

    def write_restored(
        self,
        partition: int,
        records: list[tuple[bytes, bytes | None]],
        offset: int,
        *,
        wal: bool,
    ) -> None:
        self.write_partition(partition, records, offset, wal=wal)
        self.restored(partition)

    def restored(self, partition: int) -> None:
        """Committed changelog records were written into ``partition`` (a restore, a
        standby's records): not by this worker's own commits. For what a store derives and
        keeps beside its databases; nothing here."""

    def end_bulk(self, partition: int) -> None:
        """Flush, clear the mark, and let RocksDB compact what the restore wrote (it compacted
        nothing meanwhile); :meth:`compacting` says when that is done."""
        self._written.pop(partition, None)
        pdb = self.partition_db(partition)
        if pdb.restoring():
            pdb.flush()
            pdb.mark_restoring(False)
        if pdb.bulk:
            pdb.start_compactions()

    def compacting(self, partition: int) -> bool:
        """True while RocksDB still compacts what a bulk restore wrote (in its own threads,
        with the bulk options: ``BULK_SUBCOMPACTIONS`` of them at once). Once it is done the
        database is opened again with the usual options, and this is False."""
        pdb = self.partition_db(partition)
        if pdb.compacting():
            return True
        if pdb.bulk:
            del pdb  # its column families keep the database's lock while they live
            self._partitions.reopen(partition, bulk=False)
        return False

    def apply_changelog_batch(
        self,
        batch: Iterable[EventT],
        to_key: Callable[[Any], Any],
        to_value: Callable[[Any], Any],
    ) -> None:
        writes: dict[int, list[tuple[bytes, bytes | None]]] = {}
        offsets: dict[int, int] = {}
        for event in batch:
            msg = event.message
            writes.setdefault(msg.partition, []).append((msg.key, msg.value))
            offsets[msg.partition] = msg.offset
        for partition, items in writes.items():
            self.write_partition(partition, items, offsets[partition])
            self.restored(partition)
