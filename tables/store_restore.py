"""The restore side of :class:`tables.store.TransactionalStore`: writes of committed changelog
records (Faust's recovery, and the bulk restore of ``recovery/restore.py``) and the offsets they
bring each partition database to.

A mixin of the store, kept apart so that the store's module keeps to its transactions; it reads
only what the store's constructor sets (its partition set and the keys each bulk restore wrote).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from faust.types import TP, EventT
from rocksdict import WriteBatch

from tables.partitions import PartitionSet
from tables.rocks import PartitionDB
from tables.written_keys import WrittenKeys


class RestoreWrites:
    """Committed changelog records into the partition databases (the consumer reads
    read_committed, so every record here is committed)."""

    _partitions: PartitionSet
    #: Partition -> the keys its restore into an empty database wrote so far.
    _written: dict[int, WrittenKeys]

    if TYPE_CHECKING:  # the store's own methods (tables/store.py)

        def partition_db(self, partition: int) -> PartitionDB: ...

        def write_partition(
            self,
            partition: int,
            writes: list[tuple[bytes, bytes | None]],
            offset: int | None,
            *,
            wal: bool = True,
            source_offsets_at: int | None = None,
        ) -> None: ...

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
