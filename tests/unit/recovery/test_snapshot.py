"""Portable snapshots (recovery/snapshot.py) on real RocksDB: taken from databases as the store
writes them, checked against the manifest, restored into fresh databases key for key.
The worker end to end (snapshot of a running worker, restore, restart): tests/faults F22."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from recovery.snapshot import MANIFEST, Identity, problems, restore, take
from tables.rocks import META_CF, PartitionDB
from tables.rocks_options import RocksTuning, options_for

IDENTITY = Identity("app", "events", 2)
INDEX = "dedupe-age-index"
OPTIONS, FAMILY_OPTIONS, _CACHE = options_for(RocksTuning())


def open_db(path: Path, extra: tuple[str, ...] = (INDEX,)) -> PartitionDB:
    return PartitionDB(path, OPTIONS, FAMILY_OPTIONS, extra)


def contents(pdb: PartitionDB) -> dict[str, dict[bytes, bytes]]:
    return {
        "default": dict(pdb.db.items()),
        META_CF: dict(pdb.meta.items()),
        **{name: dict(cf.items()) for name, cf in pdb.extra.items()},
    }


@pytest.fixture
def tables_dir(tmp_path: Path) -> Path:
    """Two seen_ids partitions and one producer_seqs partition, as the store writes them."""
    where = tmp_path / "data" / "v1" / "tables"
    where.mkdir(parents=True)
    for partition, n in ((0, 500), (1, 300)):
        pdb = open_db(where / f"seen_ids-{partition}.db")
        batch = WriteBatch(raw_mode=True)
        for i in range(n):
            key = f"id-{partition}-{i}".encode()
            batch.put(key, i.to_bytes(16, "big"))
            batch.put(i.to_bytes(16, "big"), key, pdb.handles[INDEX])
        pdb.write(batch, 1000 + n)
        pdb.close()
    pdb = open_db(where / "producer_seqs-0.db", ())
    batch = WriteBatch(raw_mode=True)
    batch.put(b"billing", b"\x00" * 16)
    pdb.write(batch, 7)
    pdb.close()
    return where


def test_a_snapshot_restores_every_key_of_every_family(tables_dir: Path, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    manifest = take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    assert [(c.table, c.partition, c.offset) for c in manifest.copies] == [
        ("producer_seqs", 0, 7),
        ("seen_ids", 0, 1500),
        ("seen_ids", 1, 1300),
    ]
    assert problems(snap, IDENTITY, max_age_s=60) == []
    target = tmp_path / "other" / "v1" / "tables"
    restore(snap, target, open_db_for, progress=lambda _: None)
    for name in ("seen_ids-0.db", "seen_ids-1.db"):
        a, b = open_db(tables_dir / name), open_db(target / name)
        assert contents(b) == contents(a) and len(contents(b)["default"]) > 0
        assert b.offset() == a.offset()
        a.close()
        b.close()
    restored = open_db(target / "producer_seqs-0.db", ())
    assert restored.db.get(b"billing") == b"\x00" * 16 and restored.offset() == 7


def open_db_for(path: Path, extra: tuple[str, ...]) -> PartitionDB:
    return open_db(path, extra)


def test_another_pipelines_damaged_or_old_snapshot_is_refused_with_every_problem(
    tables_dir: Path, tmp_path: Path
) -> None:
    snap = tmp_path / "snap"
    take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    ids_file = snap / "seen_ids-0.default.sst"
    data = bytearray(ids_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    ids_file.write_bytes(bytes(data))
    (snap / "seen_ids-1.dedupe-age-index.sst").unlink()
    created = json.loads((snap / MANIFEST).read_text())["created_ms"]
    found = problems(snap, Identity("app", "events", 4), max_age_s=60, now_ms=created + 3_600_000)
    text = "\n".join(found)
    assert "partitions is 2 in the snapshot, 4 here" in text
    assert "seen_ids-0.default.sst is damaged" in text
    assert "seen_ids-1.dedupe-age-index.sst is missing" in text
    assert "3,600s old, more than the 60s allowed" in text
    assert len(found) == 4


def test_a_snapshot_of_an_older_format_is_refused(tables_dir: Path, tmp_path: Path) -> None:
    """Format 1 held seen_ids keys as written; this version's databases hold UUIDs in 16
    bytes (tables/keys.py), so its files would not match the lookups."""
    snap = tmp_path / "snap"
    take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    raw = json.loads((snap / MANIFEST).read_text())
    raw["format"] = 1
    (snap / MANIFEST).write_text(json.dumps(raw))
    assert problems(snap, IDENTITY, None) == [
        f"the snapshot in {snap} is in snapshot format 1; this worker reads 2: take a new "
        "snapshot with this version, or start without one (the changelog rebuilds the state)"
    ]


def test_a_snapshot_of_a_newer_format_is_refused(tables_dir: Path, tmp_path: Path) -> None:
    """An older worker never ingests files a newer version laid out (tables/formats.py)."""
    snap = tmp_path / "snap"
    take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    raw = json.loads((snap / MANIFEST).read_text())
    raw["format"] = 3
    (snap / MANIFEST).write_text(json.dumps(raw))
    assert problems(snap, IDENTITY, None) == [
        f"the snapshot in {snap} is in snapshot format 3; this worker reads 2: it was taken by "
        "a newer version: restore it with that version (or a later one), or start without one "
        "(the changelog rebuilds the state)"
    ]


def test_a_truncated_file_or_no_manifest_is_refused(tables_dir: Path, tmp_path: Path) -> None:
    snap = tmp_path / "snap"
    take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    index = snap / "seen_ids-0.dedupe-age-index.sst"
    index.write_bytes(index.read_bytes()[:100])
    assert problems(snap, IDENTITY, None) == [
        f"seen_ids-0.dedupe-age-index.sst is 100 bytes, the manifest says "
        f"{json.loads((snap / MANIFEST).read_text())['copies'][1]['families'][INDEX][2]}"
    ]
    (snap / MANIFEST).unlink()
    assert "is missing: not a snapshot" in problems(snap, IDENTITY, None)[0]


def test_a_restore_into_a_data_dir_holding_state_is_refused(
    tables_dir: Path, tmp_path: Path
) -> None:
    snap = tmp_path / "snap"
    take(tables_dir, snap, IDENTITY, progress=lambda _: None)
    with pytest.raises(ValueError, match="already holds partition databases"):
        restore(snap, tables_dir, open_db_for)


def test_a_partition_in_the_middle_of_a_bulk_restore_is_not_snapshot(
    tables_dir: Path, tmp_path: Path
) -> None:
    pdb = open_db(tables_dir / "seen_ids-1.db")
    pdb.mark_restoring(True)
    pdb.close()
    with pytest.raises(ValueError, match="is being restored from its changelog"):
        take(tables_dir, tmp_path / "snap", IDENTITY, progress=lambda _: None)
