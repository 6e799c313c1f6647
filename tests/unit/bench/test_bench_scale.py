"""The pure parts of the scale benchmark (bench/scale_ids.py, bench/scale_measure.py), and a
tiny run end to end (bench/scale.py)."""

from __future__ import annotations

import re
import uuid
from collections import Counter

import pytest

from app.rules import partition_for
from bench import scale
from bench.scale_ids import (
    ID_SHAPES,
    SPAN_MS,
    T0,
    first_seen_ms,
    mix64,
    sample_by_partition,
    uuid_like,
)
from bench.scale_measure import parse_vm_kib
from tables import keys as key_shapes
from tables import window
from tables.key_prefixes import UUID_TAG
from tables.keys import from_disk, to_disk

UUID4 = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")
UPPER_UUID4 = re.compile(rb"[0-9A-F]{8}-[0-9A-F]{4}-4[0-9A-F]{3}-[AB][0-9A-F]{3}-[0-9A-F]{12}")
ORDER = re.compile(rb"order-[1-9][0-9]{0,19}[A-Z]{3}")
ZAKAZ = re.compile(r"заказ-[1-9][0-9]{0,19}[^\x00-\x7f]{2}")
#: Id numbers a shape is checked on: the first ones, and some near the top of the lookups'
#: range (bench/scale_phases.py draws fresh ids up to 2**63).
NUMBERS = [*range(20_000), *range(2**63 - 2_000, 2**63)]

#: Shape -> (the text's form, the disk form's tag byte or None for text kept as it is, the
#: most bytes it takes on disk).
SHAPES = {
    "uuid": (UUID4, UUID_TAG[0], 17),
    "ajs": (re.compile(rb"ajs-[0-9a-f]{32}"), key_shapes.AJS, 17),
    "ajs-next": (re.compile(rb"ajs-next-[1-9][0-9]{12}-" + UUID4.pattern), key_shapes.AJS_NEXT, 23),
    "upper-uuid": (UPPER_UUID4, key_shapes.UPPER_UUID, 17),
    "hex": (re.compile(rb"[0-9a-f]{32}"), key_shapes.HEX, 17),
    "decimal": (re.compile(rb"[1-9][0-9]{0,18}|0"), key_shapes.DECIMAL, 9),
    "ascii": (ORDER, None, 30),
}


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


def test_every_shape_has_a_test() -> None:
    assert set(ID_SHAPES) == {*SHAPES, "non-ascii", "mix"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_ids_of_a_shape_have_its_form_are_distinct_and_pack_as_expected(shape: str) -> None:
    form, tag, most = SHAPES[shape]
    id_of = ID_SHAPES[shape]
    ids = [id_of(i) for i in NUMBERS]
    assert len(set(ids)) == len(ids)
    assert id_of(12345) == ids[12345]
    for key in ids:
        assert form.fullmatch(key), key
        disk = to_disk(key)
        assert from_disk(disk) == key
        assert len(disk) <= most, key
        if tag is None:
            assert disk == key  # no packed shape: stays text
        else:
            assert disk[0] == tag, key
    if shape == "ascii":
        assert all(20 <= len(k) <= 30 and k.isascii() for k in ids)


def test_ajs_and_uuid_shaped_ids_pack_to_17_bytes() -> None:
    for shape in ("uuid", "ajs", "upper-uuid", "hex"):
        assert {len(to_disk(ID_SHAPES[shape](i))) for i in range(1_000)} == {17}


def test_non_ascii_ids_are_utf8_text_with_non_ascii_characters_and_stay_text() -> None:
    ids = [ID_SHAPES["non-ascii"](i) for i in NUMBERS]
    assert len(set(ids)) == len(ids)
    for key in ids:
        text = key.decode("utf-8")
        assert ZAKAZ.fullmatch(text), text
        assert not key.isascii() and 20 <= len(text) <= 30
        assert to_disk(key) == key and from_disk(key) == key


def test_the_mix_is_a_quarter_each_of_uuid_ajs_ascii_and_non_ascii_ids() -> None:
    ids = [ID_SHAPES["mix"](i) for i in range(40_000)]
    assert len(set(ids)) == len(ids)
    kinds = Counter(
        "uuid"
        if UUID4.fullmatch(k)
        else "ajs"
        if k.startswith(b"ajs-")
        else "ascii"
        if ORDER.fullmatch(k)
        else "non-ascii"
        if ZAKAZ.fullmatch(k.decode())
        else "other"
        for k in ids
    )
    assert kinds == {"uuid": 10_000, "ajs": 10_000, "ascii": 10_000, "non-ascii": 10_000}


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


def test_sample_by_partition_takes_the_shape_asked_for() -> None:
    part = lambda key: partition_for(key, 2)  # noqa: E731
    out = sample_by_partition(iter(range(10**9)), 2, 20, part, ID_SHAPES["ajs"])
    assert all(key.startswith(b"ajs-") and part(key) == p for p in (0, 1) for key in out[p])


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
    assert rows["id shape (--id-shape)"] == "uuid"
    assert rows["ids held"].startswith("3,000 (2 partitions")
    for kind in ("new", "held"):
        for method in ("decide", "table lookup", "raw rocksdict get"):
            assert f"lookup {kind} ids, {method} (ids/s)" in rows
    assert "x raw gets" in rows["lookup new ids, decide (ids/s)"]
    # A UUID's 16 random bytes do not compress: at least that much per id.
    assert float(rows["disk bytes per id (after compaction, SST)"]) > 16
    assert list((tmp_path / "bench-scale").iterdir()) == []  # the data dir is removed


def test_a_tiny_run_of_another_shape_states_it_and_where_the_bytes_go(
    tmp_path, monkeypatch
) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(scale, "DATA_ROOT", tmp_path / "bench-scale")
    rows = dict(
        scale.run(ids=3_000, partitions=2, lookups=200, batch=500, keep=False, id_shape="ascii")
    )
    assert rows["id shape (--id-shape)"] == "ascii"
    total = float(rows["disk bytes per id (after compaction, SST)"])
    parts = [
        float(rows[f"  of which {name}"]) for name in ("the ids (default column family)", "meta")
    ]
    # Every SST file belongs to one column family: the parts add up to the whole.
    assert abs(sum(parts) - total) <= 0.2, (parts, total)
    # "order-" ids are kept as text (29 bytes or so), once; the bookkeeping is a count per slot
    # of the 27 days the first sightings span (two partitions), under 16 bytes each.
    slots = SPAN_MS // window.slot_width(3_600_000) + 1
    assert parts[0] > 20 and parts[1] * 3_000 < 2 * slots * 16
