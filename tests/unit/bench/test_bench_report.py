"""Rendering of the contender benchmark's results: table, ratios, correctness, targets, chart."""

from __future__ import annotations

from pathlib import Path

from bench.contender_process import expiry_scans
from bench.report import COPY_FLOORS, Result, render_table, targets, write_chart


def _ok(key: str, eps: float, p99: float, **kw: object) -> Result:
    r = Result(key, status="ok", events=1000, unique=900, sustained_eps=eps, p99_ms=p99)
    r.out_total = r.out_distinct = 900
    for name, value in kw.items():
        setattr(r, name, value)
    return r


def test_table_has_ratios_to_a_and_b() -> None:
    rows = [_ok("a", 10_000, 150, out_total=1000), _ok("b", 6_000, 200), _ok("d", 3_000, 900)]
    table = render_table(rows).splitlines()
    assert table[0].startswith("| contender | status | events/s sustained")
    assert len(table) == 5
    assert "| 10,000 |" in table[2] and "| 1.00x | 1.67x |" in table[2]
    assert "| 0.60x | 1.00x |" in table[3]
    assert "| 0.30x | 0.50x |" in table[4]
    assert "copy complete" in table[2]
    assert table[3].endswith("| 900 | 900 | yes |")


def test_leaked_duplicates_and_missing_ids_show() -> None:
    r = _ok("d", 5_000, 80, out_total=905, missing=2)
    r.out_distinct = 898
    assert r.duplicates == 7
    assert r.correct == "NO: 2 missing, 7 duplicates"
    assert "NO: 2 missing, 7 duplicates" in render_table([r])


def test_failed_contender_shows_its_error_and_no_ratio() -> None:
    a = _ok("a", 10_000, 150, out_total=1000)
    e = Result("e", status="failed", error="exit 1: ModuleNotFoundError: x|y", events=1000)
    row = render_table([a, e]).splitlines()[3]
    assert "failed: exit 1: ModuleNotFoundError: x/y" in row  # a pipe would break the table
    assert "| - | - | - |" in row
    assert row.endswith("| 0 | 0 | - |")


def test_per_million_and_per_id_figures() -> None:
    r = _ok("b", 6_000, 200, cpu_seconds=2.0, disk_bytes=45_000, stored_ids=900)
    assert r.cpu_per_million == 2000.0
    assert r.disk_per_id == 50.0
    assert Result("a").cpu_per_million is None and Result("a").disk_per_id is None


def test_targets_met_and_missed() -> None:
    rows = [
        _ok("a", 10_000, 150),
        _ok("b", 10_500, 140, disk_bytes=45_000, stored_ids=900),
        _ok("g", 14_000, 120, disk_bytes=90_000, stored_ids=900),
        _ok("d", 6_000, 900, disk_bytes=40_000, stored_ids=900),
        Result("e", status="failed", error="boom"),
    ]
    got = targets(rows, 0.1)
    assert got[0] == "(b) >= 1x (a) copy, EOS, no dedup: MET (1.05x)"
    assert got[1] == "(b) >= 1.2x (g) Kafka Streams, exactly_once_v2: NOT MET (0.75x)"
    assert got[2] == "(b) >= 2x (d) Quix Streams, exactly-once: NOT MET (1.75x)"
    assert got[3].startswith("(b) >= 1x (e) Spark") and got[3].endswith("did not complete)")
    assert got[4] == "(b) p99 <= commit interval + 50 ms = 150 ms: MET (p99 140 ms)"
    assert (
        got[5]
        == "(b) state bytes per id below (d) Quix Streams, exactly-once: NOT MET (50.0 vs 44.4)"
    )
    assert got[6].startswith("(b) state bytes per id below (e) Spark") and got[6].endswith(
        "unknown"
    )
    assert (
        got[7]
        == "(b) state bytes per id below (g) Kafka Streams, exactly_once_v2: MET (50.0 vs 100.0)"
    )


def test_the_copy_floor_is_the_profiles_and_both_kafka_streams_stores_are_judged() -> None:
    rows = [_ok("a", 10_000, 150), _ok("b", 11_500, 140), _ok("h", 9_000, 120)]
    assert targets(rows, 0.1)[0] == "(b) >= 1x (a) copy, EOS, no dedup: MET (1.15x)"
    got = targets(rows, 0.1, COPY_FLOORS["dup20"])
    assert got[0] == "(b) >= 1.2x (a) copy, EOS, no dedup: NOT MET (1.15x)"
    assert got[1] == ("(b) >= 1.2x (h) Kafka Streams, key-value store + punctuator: MET (1.28x)")


def test_on_a_replicated_cluster_p99_is_judged_against_the_copys() -> None:
    rows = [_ok("a", 10_000, 160), _ok("b", 20_000, 230)]
    assert targets(rows, 0.1, replicated=True)[1] == (
        "(b) p99 <= 1.5x the copy's p99 = 240 ms: MET (p99 230 ms)"
    )
    rows = [_ok("a", 10_000, 140), _ok("b", 20_000, 230)]
    assert targets(rows, 0.1, replicated=True)[1] == (
        "(b) p99 <= 1.5x the copy's p99 = 210 ms: NOT MET (p99 230 ms)"
    )
    assert targets(rows[1:], 0.1, replicated=True)[0] == (
        "(b) p99 <= 1.5x the copy's p99: unknown (p99 230 ms)"
    )


def test_two_processes_are_compared_with_spark_on_its_two_cores() -> None:
    rows = [_ok("b", 6_000, 300), _ok("e", 7_000, 900), _ok("f", 10_500, 250)]
    got = targets(rows, 0.1)
    assert got[1] == (
        "(f), our worker on two processes, ahead of (e) Spark dropDuplicatesWithinWatermark "
        "(both on two cores): MET (1.50x)"
    )
    assert got[0].endswith("NOT MET (0.86x)")  # (b) is still judged on its own
    assert not any(line.startswith("(f)") for line in targets(rows[:2], 0.1))


def test_targets_unknown_without_b() -> None:
    got = targets([_ok("a", 10_000, 150)], 0.1)
    assert got[0].endswith("unknown")
    assert got[-1].endswith("unknown")


def test_chart_is_written(tmp_path: Path) -> None:
    path = tmp_path / "chart.png"
    rows = [_ok("a", 10_000, 150), Result("e", status="failed")]
    write_chart(path, {"dup0.6": rows, "dup20": rows})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_key_value_stores_expiry_scans_are_summed_from_its_log(tmp_path: Path) -> None:
    log = tmp_path / "contender.log"
    assert expiry_scans(log) == ""
    log.write_text("kstreams-dedup: store kv, record cache on\n")
    assert expiry_scans(log) == ""
    log.write_text(
        "kstreams-dedup: store kv, record cache on\n"
        "kstreams-dedup: expiry-scan 120 1000000 0\n"
        "other line\n"
        "kstreams-dedup: expiry-scan 1400 1200000 5\n"
    )
    assert expiry_scans(log) == (
        "expiry punctuator: 2 scans (one per task each run), 1,520 ms in all, longest 1,400 ms, "
        "2,200,000 ids read, 5 deleted"
    )
