"""The lake benchmark's report (bench/lake.py), without Spark or a broker."""

from __future__ import annotations

from bench.lake import Compaction, WriteRun, render


def test_the_report_gives_rows_per_second_against_the_append_and_the_compaction() -> None:
    runs = [
        WriteRun("append", 1, 100_000, 20.0, [3000, 1500, 1000], 30),
        WriteRun("merge", 1, 100_000, 50.0, [3000, 4000, 9000], 31),
        WriteRun("merge", 2, 100_000, 40.0, [2000, 4000, 6000], 31),
        WriteRun("append", 2, 100_000, 10.0, [1000, 1000, 1000], 30),
    ]
    text = render(
        100_000, 20_000, runs, Compaction(30, 3, 12.5, 0.9, 0.3, " (Z-order by userId)"), "## head"
    )
    lines = text.splitlines()
    assert lines[0] == "## head"
    assert "| 1 | append | 100,000 | 20.0 | 5,000 | 3 | 3,000 | 1,500 | 1,000 | 30 |" in lines
    assert "| 1 | merge | 100,000 | 50.0 | 2,000 | 3 | 3,000 | 4,000 | 9,000 | 31 |" in lines
    assert (
        "Mean over the rounds: append 7,500 rows/s, merge 2,250 rows/s (0.30x append); round 2, "
        "warm: merge 0.25x append." in lines
    )
    assert (
        "Optimize of the append table (Z-order by userId): 30 files -> 3 in 12.5 s; delta-rs "
        "reads the whole table in 0.90 s before, 0.30 s after." in text
    )
