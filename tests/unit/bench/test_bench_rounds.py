"""Rounds of the contender benchmark combined: medians, ratios within a round, leaks shown."""

from __future__ import annotations

from bench.report import Result, render_table, targets
from bench.rounds import combine
from tests.unit.bench.test_bench_report import _ok


def test_one_round_is_returned_as_it_is() -> None:
    rnd = [_ok("a", 10_000, 100), _ok("b", 8_000, 100)]
    assert combine([rnd]) is rnd
    assert rnd[1].vs(rnd[0]) == 0.8


def test_each_figure_is_the_median_and_each_ratio_the_median_within_rounds() -> None:
    # (a) is slow in the second round only: the ratio of the medians (9,000 / 10,000 = 0.9)
    # would differ from the median of the ratios within each round (0.9, 1.6, 0.95 -> 0.95).
    rounds = [
        [_ok("a", 10_000, 120), _ok("b", 9_000, 140, disk_bytes=45_000, stored_ids=900)],
        [_ok("a", 5_000, 130), _ok("b", 8_000, 150, disk_bytes=46_800, stored_ids=900)],
        [_ok("a", 10_500, 110), _ok("b", 9_975, 130, disk_bytes=44_100, stored_ids=900)],
    ]
    a, b = combine(rounds)
    assert a.sustained_eps == 10_000 and b.sustained_eps == 9_000
    assert b.p99_ms == 140 and a.p99_ms == 120
    assert b.disk_per_id == 50.0
    assert b.vs(a) == 0.95 and a.vs(b) == 10_500 / 9_975
    assert a.vs(a) == 1.0
    assert "| 0.95x | 1.00x |" in render_table([a, b]).splitlines()[3]
    assert "(b) >= 1x (a) copy, EOS, no dedup: NOT MET (0.95x)" in targets([a, b], 0.1)
    assert b.notes[-1] == "3 rounds: events/s 9,000 / 8,000 / 9,975; p99 140 ms / 150 ms / 130 ms"


def test_a_leak_in_any_round_shows() -> None:
    leaked = _ok("b", 9_000, 100, out_total=903)
    rounds = [[_ok("b", 9_000, 100)], [leaked], [_ok("b", 9_000, 100)]]
    (b,) = combine(rounds)
    assert b.duplicates == 3 and b.correct == "NO: 3 duplicates"


def test_a_round_that_did_not_complete_makes_the_row_incomplete() -> None:
    failed = Result("a", status="incomplete", error="idle 120 s", events=1000)
    rounds = [[_ok("a", 10_000, 100), _ok("b", 9_000, 100)], [failed, _ok("b", 8_000, 100)]]
    a, b = combine(rounds)
    assert a.status == "incomplete" and a.error == "idle 120 s"
    assert a.sustained_eps == 10_000  # the median of the rounds that completed
    assert b.vs(a) is None  # a ratio needs both complete
    assert "(b) >= 1x (a) copy, EOS, no dedup: unknown (it did not complete)" in targets(
        [a, b], 0.1
    )
