"""The partition databases (tables/partitions.py) on real RocksDB: a database still marked as
being bulk-restored when it is opened is rebuilt empty; one whose restore finished is kept."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from tables.partitions import PartitionSet
from tables.rocks_options import RocksTuning, options_for


def partition_set(directory: Path) -> PartitionSet:
    options, family_options, _ = options_for(RocksTuning())
    return PartitionSet(directory, "seen_ids", options, family_options, ("index",))


def write_some(parts: PartitionSet, *, wal: bool) -> None:
    pdb = parts.get(0)
    batch = WriteBatch(raw_mode=True)
    batch.put(b"id-1", b"entry")
    pdb.write(batch, 41, wal=wal)


def test_a_database_opened_while_marked_is_rebuilt_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parts = partition_set(tmp_path)
    parts.get(0).mark_restoring(True)
    write_some(parts, wal=False)
    parts.close(0)  # as a crash would leave it: the mark (synced) outlives the batches
    with caplog.at_level(logging.WARNING):
        pdb = partition_set(tmp_path).get(0)
    assert "was being restored when the worker stopped" in caplog.text
    assert pdb.offset() is None and pdb.db.get(b"id-1") is None and not pdb.restoring()


def test_a_finished_restore_is_kept(tmp_path: Path) -> None:
    parts = partition_set(tmp_path)
    pdb = parts.get(0)
    pdb.mark_restoring(True)
    write_some(parts, wal=False)
    pdb.flush()
    pdb.mark_restoring(False)
    parts.close(0)
    del pdb
    reopened = partition_set(tmp_path).get(0)
    assert reopened.offset() == 41 and reopened.db.get(b"id-1") == b"entry"


def compact_set(directory: Path) -> PartitionSet:
    """The partitions of a store whose keys have a compact disk form (tables/keys.py)."""
    options, family_options, _ = options_for(RocksTuning())
    return PartitionSet(directory, "seen_ids", options, family_options, ("index",), key_format=1)


def test_a_database_with_keys_in_another_form_is_rebuilt_empty(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = partition_set(tmp_path)  # a version that kept every key as written
    write_some(old, wal=True)
    old.close(0)
    with caplog.at_level(logging.WARNING):
        pdb = compact_set(tmp_path).get(0)
    assert "holds keys in disk form 0, this worker's is 1" in caplog.text
    assert pdb.offset() is None and pdb.db.get(b"id-1") is None


def test_the_key_form_is_recorded_with_the_first_write_and_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    parts = compact_set(tmp_path)
    assert parts.get(0).stored_key_format() == 0  # empty: nothing to rebuild, nothing written
    parts.close(0)
    parts = compact_set(tmp_path)
    write_some(parts, wal=True)
    assert parts.get(0).stored_key_format() == 1
    parts.close(0)
    with caplog.at_level(logging.WARNING):
        reopened = compact_set(tmp_path).get(0)
    assert reopened.offset() == 41 and reopened.db.get(b"id-1") == b"entry"
    assert "rebuilding" not in caplog.text
