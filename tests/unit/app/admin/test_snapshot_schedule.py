"""Scheduled snapshots (app/admin/snapshots.py): names that sort by time, which directories a
prune deletes, and real snapshots taken by the child command from real RocksDB databases."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from rocksdict import WriteBatch

from app.admin.snapshots import SnapshotSchedule, scheduled, snapshot_name, tables_dir, to_delete
from app.settings import Settings
from recovery.snapshot import MANIFEST, Identity, problems
from tables.rocks import PartitionDB
from tables.rocks_options import RocksTuning, options_for


def make(root: Path, name: str, complete: bool = True) -> Path:
    path = root / name
    path.mkdir(parents=True)
    if complete:
        (path / MANIFEST).write_text("{}")
    return path


def test_names_sort_by_time_to_the_millisecond() -> None:
    t = datetime(2026, 11, 26, 1, 30, 0, 52_000, tzinfo=UTC)
    assert snapshot_name(t) == "snapshot-20261126T013000.052Z"
    later = [snapshot_name(t + timedelta(milliseconds=ms)) for ms in (1, 999, 60_000)]
    assert sorted([*later, snapshot_name(t)]) == [snapshot_name(t), *later]


def test_a_prune_keeps_the_newest_complete_ones_and_drops_the_cut_short(tmp_path: Path) -> None:
    names = [f"snapshot-20261126T0{h}0000.000Z" for h in range(1, 6)]
    for name in names:
        make(tmp_path, name, complete=name != names[3])
    other = make(tmp_path, "my-own-backup")
    assert to_delete(tmp_path, keep=2) == [
        tmp_path / names[0],
        tmp_path / names[1],
        tmp_path / names[3],
    ]
    assert to_delete(tmp_path, keep=10) == [tmp_path / names[3]]
    complete, cut_short = scheduled(tmp_path)
    assert other not in complete + cut_short


def test_scheduled_snapshots_are_real_snapshots_and_only_the_newest_are_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    for name, value in {
        "DEDUPE_DATA_DIR": str(tmp_path / "data"),
        "DEDUPE_APP_ID": "sched",
        "DEDUPE_INPUT_TOPIC": "events",
        "DEDUPE_PARTITIONS": "2",
    }.items():
        monkeypatch.setenv(name, value)
    settings = Settings.from_env()
    where = tables_dir(settings)
    where.mkdir(parents=True)
    options, family_options, _cache = options_for(RocksTuning())
    for partition in (0, 1):
        pdb = PartitionDB(where / f"seen_ids-{partition}.db", options, family_options, ())
        batch = WriteBatch(raw_mode=True)
        for i in range(200):
            batch.put(f"id-{partition}-{i}".encode(), i.to_bytes(16, "big"))
        pdb.write(batch, 400 + partition)
        pdb.close()
        del pdb  # RocksDB's lock goes with the object
    root = tmp_path / "snapshots"
    schedule = SnapshotSchedule(root, keep=2)
    caplog.set_level(logging.INFO, logger="app.admin.snapshots")
    taken = [asyncio.run(schedule.take()) for _ in range(3)]
    assert all(taken), caplog.text
    complete, cut_short = scheduled(root)
    assert complete == taken[1:] and cut_short == []
    for snap in complete:
        assert problems(snap, Identity("sched", "events", 2), max_age_s=60) == []
    assert "2 kept, 1 deleted" in caplog.text
    # A snapshot that fails (a partition in the middle of a bulk restore is refused) is logged
    # as an error, leaves no directory and deletes none of the kept ones.
    pdb = PartitionDB(where / "seen_ids-1.db", options, family_options, ())
    pdb.mark_restoring(True)
    pdb.close()
    assert asyncio.run(schedule.take()) is None
    assert "scheduled snapshot" in caplog.text and "failed (exit 1" in caplog.text
    assert scheduled(root) == (complete, [])


def test_a_snapshot_cut_short_by_a_stopping_worker_leaves_nothing(tmp_path: Path) -> None:
    """Faust cancels its timers when the worker stops: the child is killed, nothing is kept."""
    root = tmp_path / "snapshots"

    async def cancel_one() -> None:
        task = asyncio.create_task(SnapshotSchedule(root, keep=2).take())
        await asyncio.sleep(0.3)  # the child is still starting Python
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_one())
    assert scheduled(root) == ([], [])
    children = [p for p in Path("/proc").glob("[0-9]*/cmdline") if str(root).encode() in _read(p)]
    assert children == []


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def test_the_commands_find_the_databases_where_the_worker_keeps_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``tables_dir`` works Faust's ``tabledir`` out without building the worker (the admin
    commands import no worker module): it must be the directory the worker's app uses."""
    from app.worker.factory import create_app

    monkeypatch.setenv("DEDUPE_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("DEDUPE_APP_ID", "where")
    settings = Settings.from_env()
    assert tables_dir(settings) == Path(create_app(settings).app.conf.tabledir)
