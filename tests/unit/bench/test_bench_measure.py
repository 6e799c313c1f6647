"""The pure parts of the contender benchmark: percentiles, ratios, /proc parsing, du, data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from bench.contender_data import generate
from bench.measure import (
    ProcStat,
    TreeCpu,
    descendants,
    disk_bytes,
    events_per_second,
    parse_rss_bytes,
    parse_stat,
    percentile,
    ratio,
    read_stats,
    sample_tree,
)


@pytest.mark.parametrize(
    ("values", "q", "expected"),
    [
        ([5.0], 50, 5.0),
        ([5.0], 99, 5.0),
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([4.0, 1.0, 3.0, 2.0], 0, 1.0),
        ([4.0, 1.0, 3.0, 2.0], 100, 4.0),
        (list(map(float, range(1, 101))), 99, 99.01),
        (list(map(float, range(101))), 50, 50.0),
    ],
)
def test_percentile_interpolates_like_numpy(values: list[float], q: float, expected: float) -> None:
    assert percentile(values, q) == pytest.approx(expected)


def test_percentile_of_nothing_is_none_and_q_is_checked() -> None:
    assert percentile([], 50) is None
    with pytest.raises(ValueError):
        percentile([1.0], 101)


@pytest.mark.parametrize(
    ("value", "base", "expected"),
    [(50.0, 100.0, 0.5), (None, 100.0, None), (50.0, None, None), (50.0, 0.0, None)],
)
def test_ratio(value: float | None, base: float | None, expected: float | None) -> None:
    assert ratio(value, base) == expected


def test_events_per_second() -> None:
    assert events_per_second(1000, 2.0) == 500.0
    assert events_per_second(1000, 0.0) is None
    assert events_per_second(1000, None) is None


STAT = (
    "4242 (python3 -m (x) y) S 4200 4242 4200 0 -1 4194304 1000 0 0 0 "
    "150 50 7 3 20 0 5 0 123456 1000000 2500 18446744073709551615"
)


def test_parse_stat_with_spaces_and_parentheses_in_the_name() -> None:
    # utime=150 and stime=50 are fields 14 and 15; cutime/cstime (7, 3) are not counted
    assert parse_stat(STAT) == ProcStat(pid=4242, ppid=4200, cpu_ticks=200)


def test_parse_rss_bytes() -> None:
    status = "Name:\tjava\nVmPeak:\t 9000 kB\nVmRSS:\t  2048 kB\nThreads:\t40\n"
    assert parse_rss_bytes(status) == 2048 * 1024
    assert parse_rss_bytes("Name:\tkthreadd\n") == 0


def _fake_proc(root: Path, procs: dict[int, tuple[int, int, int]]) -> None:
    """pid -> (ppid, cpu ticks, rss kB)."""
    (root / "self").mkdir()
    for pid, (ppid, ticks, rss_kb) in procs.items():
        d = root / str(pid)
        d.mkdir()
        fields = ["S", str(ppid)] + ["0"] * 9 + [str(ticks), "0"] + ["0"] * 7
        (d / "stat").write_text(f"{pid} (p {pid}) " + " ".join(fields) + "\n")
        (d / "status").write_text(f"Name:\tp\nVmRSS:\t{rss_kb} kB\n")
    (root / "999").mkdir()  # a process that vanished: no stat file


def test_process_tree_sums_rss_and_cpu_of_descendants_only(tmp_path: Path) -> None:
    _fake_proc(
        tmp_path,
        {1: (0, 5, 10), 10: (1, 100, 1000), 11: (10, 300, 3000), 12: (11, 50, 500), 20: (1, 7, 7)},
    )
    stats = read_stats(tmp_path)
    assert sorted(stats) == [1, 10, 11, 12, 20]
    assert descendants(10, stats) == [10, 11, 12]
    assert descendants(77, stats) == []
    s = sample_tree(10, tmp_path, ticks_per_second=100)
    assert s.pids == (10, 11, 12)
    assert s.rss_bytes == (1000 + 3000 + 500) * 1024
    assert s.cpu_seconds == pytest.approx(4.5)


def test_tree_cpu_keeps_children_that_exited() -> None:
    cpu = TreeCpu()
    assert cpu.update({1: 1.0, 2: 5.0}) == 6.0
    assert cpu.update({1: 2.0}) == 7.0  # pid 2 exited: its last 5 s still count
    assert cpu.update({1: 1.5}) == 7.0  # never goes backwards


def test_disk_bytes_counts_allocated_blocks(tmp_path: Path) -> None:
    assert disk_bytes(tmp_path / "missing") == 0
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "f").write_bytes(b"x" * 10_000)
    assert 10_000 <= disk_bytes(tmp_path) < 10_000 + 8192


@pytest.mark.parametrize(("events", "fraction"), [(10_000, 0.006), (10_000, 0.2), (1_000, 0.0)])
def test_generate_makes_exactly_the_asked_repeats(events: int, fraction: float) -> None:
    records = list(generate(events, fraction, seed=3))
    assert len(records) == events
    counts = Counter(r.key for r in records)
    assert len(counts) == events - round(events * fraction)
    assert all(r.key is not None and r.key == r.message_id.encode() for r in records)
    assert max(counts.values()) <= 2
    first = {}
    for r in records:
        assert first.setdefault(r.key, r.value) == r.value  # repeats are byte-identical
    assert list(generate(events, fraction, seed=3)) == records  # deterministic
    assert 200 <= sum(len(r.value) for r in records) / events <= 400


def test_worker_settings_reach_only_the_worker_contenders(tmp_path: Path) -> None:
    from bench.contender_process import Names, environment
    from bench.throughput import parse_args

    args = parse_args(["--worker-setting", "DEDUPE_COMMIT_INTERVAL=250ms"])
    assert args.worker_settings == {"DEDUPE_COMMIT_INTERVAL": "250ms"}
    names = Names("bench-x")
    for key in ("b", "f"):
        env = environment(key, "h:1", names, 4, tmp_path, args.worker_settings)
        assert env["DEDUPE_COMMIT_INTERVAL"] == "250ms"
        assert env["DEDUPE_PARTITIONS"] == "4"  # the harness's own settings win
    env = environment("d", "h:1", names, 4, tmp_path, args.worker_settings)
    assert "DEDUPE_COMMIT_INTERVAL" not in env
    with pytest.raises(SystemExit):
        parse_args(["--worker-setting", "COMMIT_INTERVAL=1s"])


def test_the_worker_group_runs_one_worker_per_port_with_its_own_dir_and_port(
    tmp_path: Path,
) -> None:
    """(f)'s launcher, with a stand-in for ``python -m app worker`` that reports its settings."""
    from bench.contender_process import Names, command
    from bench.contenders import worker_group

    cmd = command("f", "h:1", Names("bench-x"), 4, tmp_path)
    assert cmd[1:3] == ["-m", "bench.contenders.worker_group"]
    assert len(cmd[cmd.index("--web-ports") + 1].split(",")) == 2
    fake = tmp_path / "fake"
    (fake / "app").mkdir(parents=True)
    (fake / "app" / "__init__.py").write_text("")
    (fake / "app" / "__main__.py").write_text(
        "import os, pathlib\n"
        "d = pathlib.Path(os.environ['DEDUPE_DATA_DIR'])\n"
        "(d / 'seen').write_text(os.environ['DEDUPE_WEB_PORT'])\n"
    )
    state = str(tmp_path / "s")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", str(fake))
        mp.chdir(fake)
        assert worker_group.main(["--web-ports", "7001,7002", "--state-dir", state]) == 0
        assert (tmp_path / "s" / "worker-0" / "seen").read_text() == "7001"
        assert (tmp_path / "s" / "worker-1" / "seen").read_text() == "7002"
        (fake / "app" / "__main__.py").write_text("raise SystemExit(3)\n")
        assert worker_group.main(["--web-ports", "7001", "--state-dir", state]) == 3
    with pytest.raises(SystemExit):
        worker_group.parse_args(["--web-ports", "x", "--state-dir", "d"])
