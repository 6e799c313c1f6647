"""The per-partition RocksDB databases of one table: where they live, opening them (a damaged
one is set aside and rebuilt from the changelog, and so is one whose keys are in another disk
form than the store writes, unless the store converts it in place; a directory in a format
this worker does not read is refused before any, ``tables/data_dir.py``), closing them,
removing them."""

from __future__ import annotations

import logging
import re
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rocksdict import Options

from tables.data_dir import open_data_dir
from tables.rocks import PartitionDB

log = logging.getLogger(__name__)


class PartitionSet:
    """``<directory>/<table>-<partition>.db``, opened on first use and kept open."""

    def __init__(
        self,
        directory: Path,
        table_name: str,
        options: Options,
        family_options: Options,
        extra_cfs: tuple[str, ...],
        key_format: int = 0,
        bulk_options: Options | None = None,
        convert: Callable[[PartitionDB, int, str], int | None] | None = None,
    ) -> None:
        """``bulk_options``: the database options of a bulk restore into an empty database
        (``tables.rocks.StoreOptions.bulk_ids``; None: ``options`` then too). ``convert``:
        converts a database of an older key form in place (``tables/key_migration.py``), given
        it and its form; None when it cannot (the database is rebuilt from the changelog)."""
        self.directory = directory
        self._key_format = key_format
        self._table_name = table_name
        self._options = options
        self._family_options = family_options
        self._extra_cfs = extra_cfs
        self._bulk_options = bulk_options
        self._convert = convert
        self._open: dict[int, PartitionDB] = {}
        #: The directory's version, once checked (``tables/data_dir.py``).
        self.format: int | None = None

    def path(self, partition: int) -> Path:
        return self.directory / f"{self._table_name}-{partition}.db"

    def get(self, partition: int) -> PartitionDB:
        """The database of ``partition``, opened on first use."""
        pdb = self._open.get(partition)
        if pdb is None:
            pdb = self._open[partition] = self._open_db(partition)
        return pdb

    def _open_db(self, partition: int, *, bulk: bool = False) -> PartitionDB:
        if self.format is None:
            # Before any database is opened: one of a version this worker does not read is
            # never opened, let alone written (FormatRefused stops the worker).
            self.format = open_data_dir(self.directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.path(partition)
        try:
            pdb = self._new(partition, bulk)
        except Exception as exc:
            if "lock" in str(exc).lower():
                raise  # another process uses this data dir: never touch its files
            # Damaged files (deleted, truncated, corrupt): the changelog holds everything this
            # database held, so set it aside and let recovery rebuild it.
            aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
            log.error(
                "partition %d: %s is damaged (%s); moved to %s, rebuilding it from the changelog",
                partition,
                path,
                exc,
                aside.name,
            )
            path.rename(aside)
            return self._new(partition, bulk)
        why = None
        if pdb.restoring():
            # A bulk restore wrote without the write-ahead log and stopped before its flush:
            # what it wrote may be partly lost. Start the partition again from the changelog.
            why = "was being restored when the worker stopped"
        elif (found := pdb.stored_key_format()) != self._key_format and pdb.holds_data():
            # Written by a version that kept keys in another form (``tables/keys.py``): its
            # lookups would miss them. Converted on disk where the store knows how; otherwise
            # rebuilt (the changelog's records are the same in every version).
            converted = self._convert(pdb, found, path.name) if self._convert else None
            if converted is not None:
                log.warning(
                    "partition %d: %s held keys in disk form %d, this worker's is %d; "
                    "converted in place (%d keys rewritten)",
                    partition,
                    path,
                    found,
                    self._key_format,
                    converted,
                )
                return pdb
            why = f"holds keys in disk form {found}, this worker's is {self._key_format}"
        if why is None:
            return pdb
        log.warning("partition %d: %s %s; rebuilding it from the changelog", partition, path, why)
        pdb.close()
        # The column family handles keep RocksDB's lock until the object is gone.
        del pdb
        shutil.rmtree(path)
        return self._new(partition, bulk)

    def reopen(self, partition: int, *, bulk: bool) -> PartitionDB:
        """Close the database of ``partition`` and open it again, with the bulk options
        (``bulk``) or the usual ones. Open a database for a bulk restore before marking it as
        being restored: one opened marked is rebuilt empty. The caller holds no reference to
        the database it had (its column families keep RocksDB's lock while they live)."""
        self.close(partition)
        pdb = self._open[partition] = self._open_db(partition, bulk=bulk)
        return pdb

    def _new(self, partition: int, bulk: bool) -> PartitionDB:
        bulk_options = self._bulk_options if bulk else None
        return PartitionDB(
            self.path(partition),
            bulk_options or self._options,
            self._family_options,
            self._extra_cfs,
            self._key_format,
            bulk=bulk_options is not None,
        )

    def held(self) -> list[int]:
        """The partitions whose databases are open."""
        return list(self._open)

    def opened(self) -> Iterator[PartitionDB]:
        return iter(list(self._open.values()))

    def close(self, partition: int) -> None:
        pdb = self._open.pop(partition, None)
        if pdb is not None:
            pdb.close()

    def remove(self, partition: int) -> None:
        """Close the database of ``partition`` and delete it from the directory."""
        self.close(partition)
        path = self.path(partition)
        if path.exists():
            shutil.rmtree(path)

    def remove_all(self) -> None:
        """Close every database and delete this table's databases from the directory."""
        for partition in self.held():
            self.close(partition)
        pattern = re.compile(rf"{re.escape(self._table_name)}-\d+\.db")
        for path in self.directory.iterdir() if self.directory.exists() else ():
            if pattern.fullmatch(path.name):
                shutil.rmtree(path, ignore_errors=True)
