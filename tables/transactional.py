"""A Faust table whose changes join the exactly-once transaction of the record that made them.

Faust's table sends changelog records through a send buffer that its exactly-once commit does not
flush, so a change can land in the next transaction, after its record's offset was committed.
Here a change is only staged in :class:`~tables.store.TransactionalStore`; the transaction layer
pulls a partition's staged writes at its commit and sends them as the changelog records of that
transaction (``tables.protocol.ChangelogSource``), so a table never calls up into it. Faust still
declares the changelog topic, assigns its partitions with the source topics, recovers it
(``recovery/faust_adapter.py``) and keeps standbys of it.

Keys and values are raw bytes. A change is only allowed while a record of the same partition is
being processed (:data:`tables.protocol.processing_partition` is set); anything else raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import faust
from faust.types import StoreT

from adapters.faust_privates import TableShim
from tables.protocol import processing_partition
from tables.store import TransactionalStore

log = logging.getLogger(__name__)


def current_partition() -> int:
    """The partition of the record being processed (tables are co-partitioned with it)."""
    partition = processing_partition.get()
    if partition is None:
        raise RuntimeError("a transactional table is only readable and writable while processing")
    return partition


class TransactionalTable(TableShim):
    """``faust.Table`` with raw bytes keys/values, staged writes and transactional changelog."""

    def __init__(
        self,
        app: faust.App,
        *,
        name: str,
        store_factory: Callable[..., TransactionalStore] = TransactionalStore,
        **kwargs: Any,
    ) -> None:
        self.store_factory = store_factory
        self._changelog_name: str | None = None
        super().__init__(
            app,
            name=name,
            key_type=bytes,  # bytes types make Faust use the "raw" serializer: no JSON
            value_type=bytes,
            **kwargs,
        )

    def new_store(self) -> StoreT:
        store = self.store_factory(
            self.store_url(),
            self.app,
            self,
            partition_of=current_partition,
            table_name=self.name,
            key_type=self.key_type,
            value_type=self.value_type,
            key_serializer=self.key_serializer,
            value_serializer=self.value_serializer,
            options=self.options,
        )
        return store

    @property
    def store(self) -> TransactionalStore:
        store: TransactionalStore = self.data
        return store

    def changelog_name(self) -> str:
        name = self._changelog_name
        if name is None:
            name = self._changelog_name = self.changelog_topic.get_topic_name()
        return name

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        """One point read: the committed value plus this transaction's staged write.
        ``partition`` is :func:`current_partition`, when the caller has it already."""
        return self.store.get_in(current_partition() if partition is None else partition, key)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        """``table[key] = value`` (see :meth:`put`)."""
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        """``del table[key]`` (see :meth:`put`)."""
        self.put(key, None)

    def put(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        """Stage the write (None: delete); it becomes a changelog record at the commit. What
        Faust's mapping does, without its serializer registry round trip (keys and values are
        raw bytes already); it runs for every forwarded record. ``partition``: see
        :meth:`lookup`."""
        self.store.stage(current_partition() if partition is None else partition, key, value)

    def on_key_set(self, key: bytes, value: bytes) -> None:
        """Faust's hook after a write: nothing to send, the staged write is the record."""

    def on_key_del(self, key: bytes) -> None:
        """Faust's hook after a delete: nothing to send, the staged delete is the record."""
