"""This version reads the kept fixtures of data dir format 1, snapshot format 2 and changelog
format 1 (tests/format_fixtures.py says what they hold and how to regenerate them): every id,
its first-seen time (and the rest of its entry), and each partition's source offsets come back
exactly, through the worker's own store on real RocksDB. The changelog dump's restore from a
real broker is tests/integration/test_changelog_fixture.py."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Rdict

from recovery.snapshot import problems, restore
from tables import key_migration
from tables.data_dir import read_version
from tables.formats import DATA_DIR_FILE
from tables.rocks import PartitionDB, options_for
from tables.rocks_options import RocksTuning
from tables.seen_ids.store import SeenIdsStore
from tables.window import Entry
from tests.format_fixtures import (
    IDENTITY,
    ROOT,
    expected_entries,
    expected_source_offsets,
    new_store,
    read_dump,
)


def assert_holds_the_fixture(store: SeenIdsStore) -> None:
    for p in range(IDENTITY.partitions):
        expected = expected_entries(p)
        held = {store.written_key(raw): Entry.decode(value) for raw, value in store.db(p).items()}
        assert held == expected
        # The worker's own lookups (UUIDs in their 16-byte disk form) find every one.
        for key, entry in expected.items():
            value = store.committed_get(p, key)
            assert value is not None and Entry.decode(value) == entry
        assert store.source_offsets(p) == expected_source_offsets(p)
        # Counted once each: the fixture's databases, of key form 1 with the age-out index,
        # were converted on open (tables/key_migration.py) and their ids counted per slot.
        assert sum(store.counts(p).counts.values()) == store.summary(p).held == len(expected)
        assert key_migration.LEGACY_INDEX_CF not in Rdict.list_cf(str(store.partition_path(p)))


@pytest.fixture
def store_on(tmp_path: Path) -> Any:
    opened: list[SeenIdsStore] = []

    def open_on(parent: Path) -> SeenIdsStore:
        store = new_store(parent)
        opened.append(store)
        return store

    yield open_on
    for store in opened:
        for p in range(IDENTITY.partitions):
            store.close_partition(p)


def test_the_fixtures_are_small_and_complete() -> None:
    assert sum(len(expected_entries(p)) for p in range(IDENTITY.partitions)) == 295
    assert sum(f.stat().st_size for f in ROOT.rglob("*") if f.is_file()) < 400_000
    assert json.loads((ROOT / "tables" / DATA_DIR_FILE).read_text()) == {"format": 1}
    assert json.loads((ROOT / "snapshot" / "manifest.json").read_text())["format"] == 2


@pytest.mark.parametrize("version_file", [True, False], ids=["format-1", "before-the-file"])
def test_a_data_dir_of_format_1_is_read(tmp_path: Path, store_on: Any, version_file: bool) -> None:
    """Without the file: a data dir written before versions were recorded, read as format 1
    and given the file."""
    shutil.copytree(ROOT / "tables", tmp_path / "tables")  # RocksDB writes to what it opens
    if not version_file:
        (tmp_path / "tables" / DATA_DIR_FILE).unlink()
    store = store_on(tmp_path)
    assert_holds_the_fixture(store)
    assert read_version(tmp_path / "tables") == 1


def test_a_snapshot_of_format_2_is_accepted_and_restored(tmp_path: Path, store_on: Any) -> None:
    src = ROOT / "snapshot"
    assert problems(src, IDENTITY, None) == []
    options, family_options, _cache = options_for(RocksTuning())

    def open_db(path: Path, extra: tuple[str, ...]) -> PartitionDB:
        return PartitionDB(path, options, family_options, extra)

    manifest = restore(src, tmp_path / "tables", open_db, progress=lambda _: None)
    assert [c.offset for c in manifest.copies] == [158, 161]
    store = store_on(tmp_path)
    assert_holds_the_fixture(store)
    assert [store.partition_db(p).offset() for p in range(2)] == [158, 161]


def test_the_changelog_dump_of_format_1_is_written_as_the_follower_writes_it(
    tmp_path: Path, store_on: Any
) -> None:
    """The write path of the follower and the restorer (``recovery/follow.py``,
    ``recovery/restore.py``): a partition's committed records in order, each write bringing the
    store to the offset of its last record, at the offsets a broker gives them (a commit marker
    after each transaction); the marker at the end is written last, with no record. The reader
    in front of it, on a real broker: tests/integration/test_changelog_fixture.py."""
    store = store_on(tmp_path)
    writes: dict[tuple[int, int], list[tuple[bytes, bytes | None]]] = {}
    for partition, txn, key, value in read_dump(ROOT / "changelog.jsonl"):
        writes.setdefault((partition, txn), []).append((key, value))
    offsets = dict.fromkeys(range(IDENTITY.partitions), 0)
    for (partition, _txn), records in writes.items():
        last = offsets[partition] + len(records) - 1
        store.write_restored(partition, records, last, wal=True)
        offsets[partition] = last + 2  # past the transaction's commit marker
    for partition, offset in offsets.items():
        store.write_restored(partition, [], offset - 1, wal=True)
    assert_holds_the_fixture(store)


def test_a_snapshot_restore_writes_the_data_dir_version(tmp_path: Path) -> None:
    options, family_options, _cache = options_for(RocksTuning())

    def open_db(path: Path, extra: tuple[str, ...]) -> PartitionDB:
        return PartitionDB(path, options, family_options, extra)

    restore(ROOT / "snapshot", tmp_path / "tables", open_db, progress=lambda _: None)
    assert read_version(tmp_path / "tables") == 1
