"""The pure parts of the scale benchmark (bench/scale_ids.py, bench/scale_measure.py), and a
tiny run end to end (bench/scale.py)."""

from __future__ import annotations

import re
import uuid
from collections import Counter

import pytest

from app.rules import partition_for
from bench import scale
from bench.scale_ids import SPAN_MS, T0, first_seen_ms, mix64, sample_by_partition, uuid_like
from bench.scale_measure import parse_vm_kib

UUID4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def test_mix64_is_a_bijection_on_a_sample_and_stays_in_64_bits() -> None:
    values = [mix64(i) for i in range(100_000)]
    assert len(set(values)) == len(values)
    assert all(0 <= v < 2**64 for v in values)
    assert mix64(2**64 - 1) < 2**64


def test_uuid_like_ids_are_uuid4_shaped_distinct_and_deterministic() -> None:
    ids = [uuid_like(i) for i in range(50_000)]
    assert all(len(k) == 36 and UUID4.fullmatch(k) for k in ids)
    assert len(set(ids)) == len(ids)
    assert uuid_like(12345) == ids[12345]
    assert uuid.UUID(ids[0].decode()).version == 4


def test_uuid_like_ids_spread_evenly_over_partitions() -> None:
    counts = Counter(partition_for(uuid_like(i), 8) for i in range(80_000))
    assert set(counts) == set(range(8))
    assert all(abs(c - 10_000) < 500 for c in counts.values())


def test_first_sightings_span_the_load_inside_the_window() -> None:
    assert first_seen_ms(0, 1000) == T0
    assert first_seen_ms(999, 1000) < T0 + SPAN_MS
    assert first_seen_ms(500, 1000) == T0 + SPAN_MS // 2
    assert SPAN_MS < 28 * 86_400_000


def test_sample_by_partition_fills_each_partition_with_its_own_ids() -> None:
    part = lambda key: partition_for(key, 4)  # noqa: E731
    out = sample_by_partition(iter(range(10**9)), 4, 50, part)
    assert [len(ids) for ids in out] == [50] * 4
    for p, ids in enumerate(out):
        assert all(part(key) == p for key in ids)


@pytest.mark.parametrize(
    ("text", "name", "expected"),
    [
        ("VmPeak:\t  2000 kB\nVmHWM:\t  1234 kB\nVmRSS:\t  1000 kB\n", "VmHWM", 1234 * 1024),
        ("VmHWM:\t  1234 kB\nVmRSS:\t  1000 kB\n", "VmRSS", 1000 * 1024),
        ("Name: kworker\n", "VmRSS", 0),
    ],
)
def test_parse_vm_kib(text: str, name: str, expected: int) -> None:
    assert parse_vm_kib(text, name) == expected


def test_a_tiny_run_measures_every_figure(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(scale, "DATA_ROOT", tmp_path / "bench-scale")
    rows = dict(scale.run(ids=3_000, partitions=2, lookups=200, batch=500, keep=False))
    assert rows["ids held"].startswith("3,000 (2 partitions")
    for kind in ("new", "held"):
        for method in ("decide", "table lookup", "raw rocksdict get"):
            assert f"lookup {kind} ids, {method} (ids/s)" in rows
    assert "x raw gets" in rows["lookup new ids, decide (ids/s)"]
    assert float(rows["disk bytes per id (after compaction, SST)"]) > 36
    assert list((tmp_path / "bench-scale").iterdir()) == []  # the data dir is removed
