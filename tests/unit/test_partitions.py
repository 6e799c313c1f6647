"""The partition databases (tables/partitions.py) on real RocksDB: a database still marked as
being bulk-restored when it is opened is rebuilt empty; one whose restore finished is kept."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from tables.partitions import PartitionSet
from tables.rocks import RocksTuning, options_for


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
