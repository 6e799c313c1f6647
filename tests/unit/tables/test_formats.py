"""The format versions and their rule (tables/formats.py), the data dir's version file
(tables/data_dir.py) and the changelog's version in the source-offsets record
(tables/source_offsets.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tables.data_dir import open_data_dir, read_version
from tables.formats import (
    CHANGELOG,
    CHANGELOG_FIELD,
    DATA_DIR,
    DATA_DIR_FILE,
    SNAPSHOT,
    Format,
    FormatRefused,
)
from tables.source_offsets import (
    changelog_version,
    check_changelog_version,
    decode_source_offsets,
    encode_source_offsets,
)

RULE = Format("thing", current=3, reads=frozenset({2, 3}), older="OLDER", newer="NEWER")


@pytest.mark.parametrize(
    ("found", "expected"),
    [
        (3, None),
        (2, None),  # the previous version is still read
        (1, "x is in thing format 1; this worker reads 2, 3: OLDER"),
        (0, "x is in thing format 0; this worker reads 2, 3: OLDER"),
        (4, "x is in thing format 4; this worker reads 2, 3: NEWER"),
        (99, "x is in thing format 99; this worker reads 2, 3: NEWER"),
    ],
)
def test_a_version_is_read_or_refused_with_the_way_forward(
    found: int, expected: str | None
) -> None:
    assert RULE.problem(found, "x") == expected
    if expected is None:
        RULE.check(found, "x")
    else:
        with pytest.raises(FormatRefused) as refused:
            RULE.check(found, "x")
        assert str(refused.value) == expected


@pytest.mark.parametrize("fmt", [DATA_DIR, SNAPSHOT, CHANGELOG], ids=lambda f: f.name)
def test_each_format_reads_what_it_writes_and_refuses_the_next(fmt: Format) -> None:
    assert fmt.current in fmt.reads
    newer = fmt.problem(fmt.current + 1, "it")
    assert newer is not None and "newer version" in newer


def test_a_new_data_dir_gets_the_current_version(tmp_path: Path) -> None:
    tables = tmp_path / "tables"
    assert open_data_dir(tables) == DATA_DIR.current
    assert json.loads((tables / DATA_DIR_FILE).read_text()) == {"format": DATA_DIR.current}
    assert not (tables / (DATA_DIR_FILE + ".tmp")).exists()


def test_a_data_dir_without_the_file_is_the_first_layout_and_gets_the_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "seen_ids-0.db").mkdir()
    assert read_version(tmp_path) is None
    assert open_data_dir(tmp_path) == 1
    assert read_version(tmp_path) == 1


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            '{"format": 2}',
            "is in data dir format 2; this worker reads 1: it was written by a newer",
        ),
        ('{"format": 0}', "is in data dir format 0; this worker reads 1: stop the worker, move"),
        ("{half", "dedupe-format.json is unreadable"),
        ("{}", "dedupe-format.json is unreadable"),
    ],
)
def test_a_data_dir_of_another_or_an_unreadable_version_is_refused_and_left_alone(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / DATA_DIR_FILE).write_text(content)
    with pytest.raises(FormatRefused, match=message):
        open_data_dir(tmp_path)
    assert (tmp_path / DATA_DIR_FILE).read_text() == content


def test_the_source_offsets_record_carries_the_changelog_version_not_as_a_topic() -> None:
    raw = encode_source_offsets({"events": 12, "repartition": 3})
    assert json.loads(raw)[CHANGELOG_FIELD] == CHANGELOG.current
    assert changelog_version(raw) == CHANGELOG.current
    assert decode_source_offsets(raw) == {"events": 12, "repartition": 3}


def test_a_record_without_the_version_is_the_first_changelog_format() -> None:
    """What every worker wrote before the field existed (tests/fixtures/formats-v1 has some)."""
    raw = b'{"events":12}'
    assert changelog_version(raw) == 1
    check_changelog_version(raw, "here")
    assert decode_source_offsets(raw) == {"events": 12}


def test_a_record_of_a_newer_changelog_format_is_refused() -> None:
    raw = json.dumps({"events": 12, CHANGELOG_FIELD: CHANGELOG.current + 1}).encode()
    with pytest.raises(FormatRefused, match="p-3 is in changelog format 2; this worker reads 1"):
        check_changelog_version(raw, "p-3")
    with pytest.raises(FormatRefused, match="unreadable"):
        check_changelog_version(b"[1]", "p-3")
