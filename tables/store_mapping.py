"""Faust's mapping interface of :class:`tables.store.TransactionalStore`: reads and writes of the
partition of the record being processed, over its open transaction's staged writes and the
committed state.

A mixin of the store, kept apart so that the store's module keeps to its transactions. The
per-record calls (:meth:`StoreMapping.get_in`, :meth:`StoreMapping.stage`) are on the hot path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, cast

from rocksdict import Rdict

from tables.partitions import PartitionSet
from tables.staging import Staging


class StoreMapping:
    """``table[key]`` reads and writes, in the partition ``_partition_of()`` names."""

    _partition_of: Callable[[], int]
    _partitions: PartitionSet
    _staging: Staging

    if TYPE_CHECKING:  # the store's own methods (tables/store.py)

        def db(self, partition: int) -> Rdict: ...

        @staticmethod
        def disk_key(key: bytes) -> bytes: ...

        @staticmethod
        def written_key(raw: bytes) -> bytes: ...

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
