"""The sizing arithmetic (app/admin/capacity/model.py) and the command's output and refusals."""

from __future__ import annotations

import math

import pytest

from app.admin.capacity.figures import Figure, load
from app.admin.capacity.model import Load, plan
from app.admin.capacity.report import main

DAY = 86400.0


def figures(**values: float) -> dict[str, Figure]:
    """The committed figures, with some replaced by round numbers the tests can reason about."""
    out = load()
    for name, value in values.items():
        f = out[name]
        out[name] = Figure(name, value, f.unit, f.meaning, f.source)
    return out


ROUND = figures(
    disk_bytes_per_uuid_id=50.0,
    changelog_bytes_per_uuid_id=30.0,
    restore_records_per_second=500_000.0,
    worker_events_per_second=40_000.0,
    evictions_per_second_at_cap=20_000.0,
    worker_rss_mib_at_scale=500.0,
    worker_rss_mib_under_load=600.0,
)


def a_load(**changes: object) -> Load:
    base: dict[str, object] = {
        "new_ids_per_second": 800.0,
        "events_per_second": 1000.0,
        "window": 7 * DAY,
        "allowed_lateness": 3600.0,
        "bucket": 3600.0,
        "id_length": 36,
        "disk_key_bytes": 17,
        "partitions": 8,
        "workers": 4,
        "cap": 20_000_000,
        "min_window": DAY,
        "replication": 3,
    }
    base.update(changes)
    return Load(**base)  # type: ignore[arg-type]


def test_below_the_cap_the_partition_holds_its_window_lateness_and_a_bucket() -> None:
    pl = plan(a_load(cap=10**9), ROUND)
    keep = 7 * DAY + 3600 + 3600
    assert pl.new_ids_per_partition == 100.0
    assert pl.ids_held_per_partition == pl.ids_needed_per_partition == 100.0 * keep
    assert not pl.capped and not pl.short and pl.effective_window == 7 * DAY
    assert pl.disk_per_partition == 100.0 * keep * 50.0
    assert pl.changelog_per_partition == 100.0 * keep * 30.0
    assert pl.restore_seconds_per_partition == 100.0 * keep / 500_000
    assert pl.partitions_per_worker == 2
    assert pl.restore_seconds_per_worker == 2 * 100.0 * keep / 500_000
    assert pl.memory_per_worker == 600 * 2**20
    assert pl.busiest_worker_events == 250.0 and pl.headroom == 160.0


def test_the_cap_shortens_the_window_and_says_what_keeps_it() -> None:
    pl = plan(a_load(cap=1_000_000), ROUND)
    keep = 7 * DAY + 7200
    assert pl.capped and pl.ids_held_per_partition == 1_000_000
    assert pl.effective_window == 1_000_000 / 100.0  # 10,000 s
    assert pl.short  # under a day
    assert pl.partitions_for_window == math.ceil(800 * keep / 1_000_000)
    assert pl.cap_for_window == math.ceil(100.0 * keep)
    # the suggestions keep the whole window when fed back
    more = plan(a_load(cap=1_000_000, partitions=pl.partitions_for_window), ROUND)
    assert not more.capped
    assert not plan(a_load(cap=pl.cap_for_window), ROUND).capped


def test_a_shortened_window_above_the_minimum_is_not_short() -> None:
    fast = {"new_ids_per_second": 8000.0, "events_per_second": 8000.0}
    pl = plan(a_load(cap=200_000_000, **fast), ROUND)
    assert pl.capped and pl.effective_window == 200_000  # 200M ids / 1,000 ids/s, 2.3 days
    assert not pl.short
    assert plan(a_load(cap=200_000_000, min_window=3 * DAY, **fast), ROUND).short


def test_ids_of_other_shapes_add_their_key_bytes_once_on_disk_and_in_the_changelog() -> None:
    pl = plan(a_load(id_length=59, disk_key_bytes=59), ROUND)
    assert pl.disk_bytes_per_id == 50.0 + (59 - 17)
    assert pl.changelog_bytes_per_id == 30.0 + (59 - 36)
    # analytics-next's ajs-next ids, packed into 23 bytes; the changelog keeps their text
    pl = plan(a_load(id_length=59, disk_key_bytes=23), ROUND)
    assert pl.disk_bytes_per_id == 50.0 + (23 - 17)
    assert pl.changelog_bytes_per_id == 30.0 + (59 - 36)
    # an uncompressed UUID-length id: its text form, not the 17-byte one
    assert plan(a_load(disk_key_bytes=36), ROUND).disk_bytes_per_id == 50.0 + 19


def test_the_rate_sets_the_fewest_partitions_and_the_headroom() -> None:
    pl = plan(a_load(events_per_second=100_000.0, new_ids_per_second=50_000.0), ROUND)
    assert pl.min_partitions_for_rate == 3  # 40,000 events/s each
    assert pl.headroom == 40_000 / (100_000 * 2 / 8)
    assert pl.min_partitions_for_eviction == 3  # 20,000 evictions/s each
    assert pl.eviction_too_slow is False  # 6,250 new ids/s per partition
    # more workers than partitions: the extra ones idle
    assert plan(a_load(workers=20), ROUND).partitions_per_worker == 1


def test_the_command_prints_the_plan_and_the_sources(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--new-ids-per-second", "5000", "--window", "7d", "--partitions", "8"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "5,000 new ids/s" in out and "8 partitions, 8 workers" in out
    assert "WARNING: the cap holds 20,000,000 ids per partition, 625.0 new ids/s" in out
    assert "153 partitions at this cap, or DEDUPE_MAX_IDS_PER_PARTITION=382500000" in out
    # 20M ids per partition is more than the scale benchmark held in one: said so
    assert "Note: 20,000,000 ids per partition is 3.2x the most the benchmarks measured" in out
    for figure in load().values():
        assert figure.cited in out


def test_the_command_lists_every_problem_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--id-shape", "guid", "--partitions", "0", "--repeat-share", "0.2"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "give --new-ids-per-second" in err
    assert "--id-shape 'guid'" in err and "--partitions must be above 0" in err


def test_events_and_the_repeat_share_give_the_new_ids(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--events-per-second", "10000", "--repeat-share", "0.2", "--id-shape", "ajs"]) == 0
    out = capsys.readouterr().out
    assert (
        "8,000 new ids/s in 10,000 events/s" in out
        and "ids: 59 characters, 23 bytes on disk" in out
    )
