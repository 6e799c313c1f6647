"""``TransactionalStore`` applying changelog batches (Faust's recovery path) and the persisted
offset."""

from __future__ import annotations

import pytest

from tables.rocks import OFFSET_KEY
from tables.store import TransactionalStore
from tests.unit.store.support import (
    Harness,
    changelog_event,
    commit,
    identity,
    offset_bytes,
    on_disk,
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
