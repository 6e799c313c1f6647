"""``TransactionalStore`` applying changelog batches (Faust's recovery path) and the persisted
offset."""

from __future__ import annotations

import json

import pytest

from tables.formats import CHANGELOG_FIELD, FormatRefused
from tables.rocks import OFFSET_KEY
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tables.store import TransactionalStore
from tests.unit.tables.store.support import (
    Harness,
    changelog_event,
    commit,
    identity,
    offset_bytes,
    on_disk,
    on_disk_split,
    read,
    tp,
)

# --- recovery from the changelog -------------------------------------------------------------


#: (batch as (partition, offset, key, value)), expected content per partition incl. offset key
BATCHES = [
    pytest.param(
        [(0, 5, b"a", b"1")],
        {0: {b"a": b"1", OFFSET_KEY: offset_bytes(5)}},
        id="one",
    ),
    pytest.param(
        [(0, 5, b"a", b"1"), (0, 6, b"b", b"2"), (0, 9, b"a", b"3")],
        {0: {b"a": b"3", b"b": b"2", OFFSET_KEY: offset_bytes(9)}},
        id="overwrite-last-offset",
    ),
    pytest.param(
        [(1, 0, b"a", b"1"), (1, 1, b"a", None)],
        {1: {OFFSET_KEY: offset_bytes(1)}},
        id="delete",
    ),
    pytest.param(
        [(0, 5, b"a", b"1"), (2, 100, b"x", b"9"), (0, 6, b"b", b"2"), (2, 101, b"x", None)],
        {
            0: {b"a": b"1", b"b": b"2", OFFSET_KEY: offset_bytes(6)},
            2: {OFFSET_KEY: offset_bytes(101)},
        },
        id="two-partitions",
    ),
]


@pytest.mark.parametrize(("events", "expected"), BATCHES)
def test_apply_changelog_batch(
    store: TransactionalStore,
    events: list[tuple[int, int, bytes, bytes | None]],
    expected: dict[int, dict[bytes, bytes]],
) -> None:
    store.apply_changelog_batch([changelog_event(*e) for e in events], identity, identity)
    for partition in range(4):
        assert on_disk(store, partition) == expected.get(partition, {})
        want = expected.get(partition, {}).get(OFFSET_KEY)
        got = store.persisted_offset(tp(partition))
        assert got == (None if want is None else int.from_bytes(want, "big"))


def test_apply_changelog_batch_deletes_committed_keys(
    harness: Harness, store: TransactionalStore
) -> None:
    commit(harness, store, 3, {b"a": b"1", b"b": b"2"}, 10)
    assert store.persisted_offset(tp(3)) == 11  # through the commit marker at 11
    # The next transaction's record follows the marker; a batch stores its last record's offset.
    store.apply_changelog_batch([changelog_event(3, 12, b"a", None)], identity, identity)
    assert on_disk(store, 3) == {b"b": b"2", OFFSET_KEY: offset_bytes(12)}
    assert store.persisted_offset(tp(3)) == 12
    assert read(harness, store, 3, b"a") is None


def test_empty_changelog_batch_writes_nothing(store: TransactionalStore) -> None:
    store.apply_changelog_batch([], identity, identity)
    assert not store.directory.exists() or not any(store.directory.iterdir())


def test_set_persisted_offset(store: TransactionalStore) -> None:
    assert store.persisted_offset(tp(0)) is None
    store.set_persisted_offset(tp(0), 123)
    assert store.persisted_offset(tp(0)) == 123
    assert store.persisted_offset(tp(1)) is None


def test_a_transaction_of_a_newer_changelog_format_is_refused_before_any_of_it_is_written(
    harness: Harness,
) -> None:
    """An older worker restoring what a newer one wrote stops (tables/formats.py) instead of
    holding ids it may misread: neither the ids nor the offset of the refused write land."""
    store = harness.new_store()
    store.write_restored(0, [(b"a", b"1"), (SOURCE_OFFSETS_KEY, b'{"in":3}')], 1, wal=True)
    newer = json.dumps({"in": 9, CHANGELOG_FIELD: 2}).encode()
    with pytest.raises(FormatRefused, match="partition 0 is in changelog format 2"):
        store.write_restored(0, [(b"b", b"2"), (SOURCE_OFFSETS_KEY, newer)], 5, wal=True)
    assert on_disk_split(store, 0)[0] == {b"a": b"1"}
    assert store.source_offsets(0) == {"in": 3}
    assert store.partition_db(0).offset() == 1
