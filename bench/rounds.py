"""Rounds of the contender benchmark combined into one row per contender.

Each figure of a row is its median over the rounds; a ratio between two contenders is taken
within each round and then the median over the rounds (the issue's "ratios in one run, median of
three runs"), so one slow round of one contender does not decide a target: on two shared cores a
single contender's throughput moves by a third between back-to-back runs. The correctness
columns come from the round with the most problems, so a leak in any round shows. Rounds run
whole, one after another (every profile and contender, then again), so a drift of the machine
meets every contender alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from statistics import median

from bench.report import Result


def _median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return median(present) if present else None


def _median_int(values: Iterable[int | None]) -> int | None:
    m = _median(values)
    return None if m is None else round(m)


def _problems(r: Result) -> int:
    return r.missing + r.duplicates + r.unexpected + (r.status != "ok")


def _spread(runs: list[Result]) -> str:
    def each(get: Callable[[Result], float | None], unit: str = "") -> str:
        return " / ".join("-" if (v := get(r)) is None else f"{v:,.0f}{unit}" for r in runs)

    return (
        f"{len(runs)} rounds: events/s {each(lambda r: r.sustained_eps)}; "
        f"p99 {each(lambda r: r.p99_ms, ' ms')}"
    )


def combine(rounds: list[list[Result]]) -> list[Result]:
    """One row per contender over ``rounds`` (each round: the same contenders, in order). One
    round is returned as it is."""
    if len(rounds) == 1:
        return rounds[0]
    keys = [r.key for r in rounds[0]]
    by_round = [{r.key: r for r in rnd} for rnd in rounds]
    rows = []
    for key in keys:
        runs = [rnd[key] for rnd in by_round]
        ok = [r for r in runs if r.status == "ok"]
        worst = max(runs, key=_problems)
        row = Result(
            key=key,
            status="ok" if len(ok) == len(runs) else worst.status,
            error=next((r.error for r in runs if r.error), ""),
            events=runs[0].events,
            unique=runs[0].unique,
            sustained_eps=_median(r.sustained_eps for r in ok),
            overall_eps=_median(r.overall_eps for r in ok),
            p50_ms=_median(r.p50_ms for r in ok),
            p99_ms=_median(r.p99_ms for r in ok),
            latency_samples=min(r.latency_samples for r in runs),
            latency_missing=max(r.latency_missing for r in runs),
            peak_rss_bytes=_median_int(r.peak_rss_bytes for r in ok),
            cpu_seconds=_median(r.cpu_seconds for r in ok),
            disk_bytes=_median_int(r.disk_bytes for r in ok),
            stored_ids=_median_int(r.stored_ids for r in ok) or 0,
            out_total=worst.out_total,
            out_distinct=worst.out_distinct,
            missing=worst.missing,
            unexpected=worst.unexpected,
            notes=[*runs[0].notes, _spread(runs)],
        )
        # Each round's rows are single-round results: vs() is their ratio within the round.
        ratios = {other: _median(rnd[key].vs(rnd[other]) for rnd in by_round) for other in keys}
        row.ratios = {other: m for other, m in ratios.items() if m is not None}
        rows.append(row)
    return rows
