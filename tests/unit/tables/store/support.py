"""Shared by the tests of ``tables.store.TransactionalStore`` (tests/unit/tables/store/): a
harness that builds stores on real rocksdict databases in a temporary directory, and helpers
that read their databases and commit through them."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import faust
from faust.types import TP
from rocksdict import AccessType, Options, Rdict

from tables.rocks import META_CF, OFFSET_KEY
from tables.rocks_options import RocksTuning
from tables.store import TransactionalStore

CHANGELOG = "t-unit-seen-changelog"


def tp(partition: int) -> TP:
    return TP(CHANGELOG, partition)


class Harness:
    """Builds stores on one data directory; ``current[0]`` is the partition being processed."""

    def __init__(self, datadir: Path) -> None:
        self.app = faust.App("t-unit", store="rocksdb://", datadir=str(datadir))
        self.current = [0]
        self.stores: list[TransactionalStore] = []

    def new_store(
        self, table_name: str = "seen", tuning: RocksTuning | None = None
    ) -> TransactionalStore:
        store = TransactionalStore(
            "rocksdb://",
            self.app,
            types.SimpleNamespace(name=table_name),
            partition_of=lambda: self.current[0],
            tuning=tuning or RocksTuning(),
            table_name=table_name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.stores.append(store)
        return store

    def at(self, partition: int) -> Harness:
        self.current[0] = partition
        return self


def on_disk_split(store: TransactionalStore, partition: int) -> tuple[dict[bytes, bytes], Any]:
    """What a separate read-only handle sees in the partition's database: the ids (default
    column family) and the stored changelog offset (META_CF, OFFSET_KEY; None if absent)."""
    path = store.partition_path(partition)
    if not path.exists():
        return {}, None
    db = Rdict(
        str(path),
        Options(raw_mode=True),
        column_families={META_CF: Options(raw_mode=True)},
        access_type=AccessType.read_only(),
    )
    meta = db.get_column_family(META_CF)
    try:
        return dict(db.items()), meta.get(OFFSET_KEY)
    finally:
        meta.close()
        db.close()


def on_disk(store: TransactionalStore, partition: int) -> dict[bytes, bytes]:
    """What a separate read-only handle sees in the partition's database: the ids, plus the
    stored changelog offset (kept in its own column family) under OFFSET_KEY."""
    out, offset = on_disk_split(store, partition)
    if offset is not None:
        out[OFFSET_KEY] = offset
    return out


def through_marker(changelog_offset: int) -> bytes:
    """What commit_partition stores: the transaction's commit marker follows its last
    changelog record, so the store holds the changelog through ``changelog_offset + 1``."""
    return offset_bytes(changelog_offset + 1)


def offset_bytes(offset: int) -> bytes:
    return offset.to_bytes(8, "big")


def commit(
    harness: Harness,
    store: TransactionalStore,
    partition: int,
    writes: dict[bytes, bytes | None],
    offset: int | None,
) -> None:
    harness.at(partition)
    for key, value in writes.items():
        if value is None:
            del store[key]
        else:
            store[key] = value
    store.commit_partition(partition, offset)


def read(harness: Harness, store: TransactionalStore, partition: int, key: bytes) -> bytes | None:
    harness.at(partition)
    try:
        return store[key]
    except KeyError:
        return None


def changelog_event(partition: int, offset: int, key: bytes, value: bytes | None) -> Any:
    message = types.SimpleNamespace(
        topic=CHANGELOG, partition=partition, offset=offset, key=key, value=value
    )
    return types.SimpleNamespace(message=message)


def identity(x: Any) -> Any:
    return x
