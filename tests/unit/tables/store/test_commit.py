"""``TransactionalStore.commit_partition``: writes, deletes and the changelog offset in one write,
the source offsets with them, and what a commit does after a rebuild or a stop."""

from __future__ import annotations

import pytest
from faust.types import TP

from tables.rocks import OFFSET_KEY
from tables.source_offsets import SOURCE_OFFSETS_KEY, encode_source_offsets
from tables.store import TransactionalStore
from tests.unit.tables.store.support import (
    Harness,
    changelog_event,
    commit,
    on_disk,
    on_disk_split,
    read,
    through_marker,
    tp,
)

#: (committed before, writes of the transaction, committed after)
COMMITS = [
    pytest.param({}, {b"a": b"1"}, {b"a": b"1"}, id="insert"),
    pytest.param({b"a": b"1"}, {b"a": b"2"}, {b"a": b"2"}, id="overwrite"),
    pytest.param({b"a": b"1", b"b": b"2"}, {b"a": None}, {b"b": b"2"}, id="delete"),
    pytest.param({}, {b"a": None}, {}, id="delete-missing"),
    pytest.param({b"a": b"1"}, {b"a": None, b"c": b"3"}, {b"c": b"3"}, id="delete-and-insert"),
    pytest.param({}, {b"a": b"1", b"b": b"2"}, {b"a": b"1", b"b": b"2"}, id="two"),
]


@pytest.mark.parametrize(("before", "writes", "after"), COMMITS)
def test_commit_partition_applies_writes_deletes_and_offset(
    harness: Harness,
    store: TransactionalStore,
    before: dict[bytes, bytes],
    writes: dict[bytes, bytes | None],
    after: dict[bytes, bytes],
) -> None:
    commit(harness, store, 1, before, 10)
    commit(harness, store, 1, writes, 11)
    assert on_disk(store, 1) == {**after, OFFSET_KEY: through_marker(11)}
    assert store.persisted_offset(tp(1)) == 12
    for key in {*before, *writes}:
        assert read(harness, store, 1, key) == after.get(key)


@pytest.mark.parametrize(
    ("writes", "offset", "expected"),
    [
        pytest.param({}, None, None, id="nothing"),
        pytest.param(
            {b"a": b"1"}, None, {b"a": b"1", OFFSET_KEY: through_marker(3)}, id="no-offset"
        ),
        # an offset but no staged writes: the writes it covers are gone, the offset stays
        pytest.param({}, 7, None, id="offset-only"),
    ],
)
def test_commit_partition_without_offset_or_writes(
    harness: Harness,
    store: TransactionalStore,
    writes: dict[bytes, bytes],
    offset: int | None,
    expected: dict[bytes, bytes] | None,
) -> None:
    commit(harness, store, 0, {b"k": b"v"}, 3)
    commit(harness, store, 0, writes, offset)
    if expected is None:
        expected = {b"k": b"v", OFFSET_KEY: through_marker(3)}
    else:
        expected = {b"k": b"v", **expected}
    assert on_disk(store, 0) == expected


def test_commit_of_untouched_partition_creates_nothing(
    harness: Harness, store: TransactionalStore
) -> None:
    store.commit_partition(5, None)
    assert not store.partition_path(5).exists()


def test_commit_only_touches_its_partition(harness: Harness, store: TransactionalStore) -> None:
    harness.at(0)
    store[b"a"] = b"0"
    harness.at(1)
    store[b"b"] = b"1"
    store.commit_partition(0, 4)
    assert on_disk(store, 0) == {b"a": b"0", OFFSET_KEY: through_marker(4)}
    assert on_disk(store, 1) == {}
    assert store.staged_count(1) == 1
    assert read(harness, store, 1, b"b") == b"1"


# --- source offsets: each transaction's record of them, kept apart from the ids --------------


def test_source_offsets_commit_with_the_transaction_and_are_not_ids(
    harness: Harness, store: TransactionalStore
) -> None:
    harness.at(0)
    store[b"id"] = b"v"
    store.stage_source_offsets(0, encode_source_offsets({"in": 10, "rp": 2}))
    assert store.source_offsets(0) == {}  # staged: not committed yet
    store.commit_partition(0, 5)
    assert store.source_offsets(0) == {"in": 10, "rp": 2}
    assert on_disk(store, 0) == {b"id": b"v", OFFSET_KEY: through_marker(5)}  # not an id

    harness.at(0)
    store.stage_source_offsets(0, encode_source_offsets({"in": 20, "rp": 2}))
    store.discard_partition(0)  # the transaction did not commit
    assert store.source_offsets(0) == {"in": 10, "rp": 2}


def test_source_offsets_are_recovered_from_the_changelog(harness: Harness) -> None:
    store = harness.new_store()
    later = encode_source_offsets({"in": 42})
    store.apply_changelog_batch(
        [
            changelog_event(0, 0, b"a", b"1"),
            changelog_event(0, 1, SOURCE_OFFSETS_KEY, encode_source_offsets({"in": 7})),
            changelog_event(0, 3, b"b", b"2"),
            changelog_event(0, 4, SOURCE_OFFSETS_KEY, later),
        ],
        to_key=lambda k: k,
        to_value=lambda v: v,
    )
    assert store.source_offsets(0) == {"in": 42}
    assert on_disk_split(store, 0)[0] == {b"a": b"1", b"b": b"2"}


def test_a_live_commit_keeps_where_its_source_offsets_record_is_and_a_restore_clears_it(
    harness: Harness, store: TransactionalStore
) -> None:
    """A live commit's source offsets are to be confirmed in the changelog before a raise uses
    them (``app/eos/positions.py``): the store keeps the record's changelog offset. Restored
    ones were read committed: nothing to confirm."""
    assert store.source_offsets_at(0) is None
    harness.at(0)
    store[b"id"] = b"v"
    store.stage_source_offsets(0, encode_source_offsets({"in": 10}))
    store.commit_partition(0, 5)
    assert store.source_offsets_at(0) == 5
    harness.at(0)
    store[b"id2"] = b"v"
    store.commit_partition(0, 9)  # a transaction without a source-offsets record
    assert store.source_offsets_at(0) == 5
    store.write_restored(0, [(SOURCE_OFFSETS_KEY, encode_source_offsets({"in": 12}))], 14, wal=True)
    assert store.source_offsets(0) == {"in": 12}
    assert store.source_offsets_at(0) is None


def test_rebuild_partition_deletes_its_database_only(
    harness: Harness, store: TransactionalStore
) -> None:
    for partition in (0, 1):
        harness.at(partition)
        store[b"id"] = b"v"
        store.stage_source_offsets(partition, encode_source_offsets({"in": 10}))
        store.commit_partition(partition, 5)
    harness.at(0)
    store[b"staged"] = b"v"
    store.rebuild_partition(0)
    assert not store.partition_path(0).exists()
    assert store.persisted_offset(TP("t", 0)) is None  # reopened empty: recovery restores it
    assert store.source_offsets(0) == {} and store.source_offsets_at(0) is None
    assert on_disk_split(store, 0)[0] == {}
    assert store.staged_count(0) == 0  # the open transaction's writes went with it
    assert on_disk_split(store, 1)[0] == {b"id": b"v"}
    assert store.source_offsets_at(1) == 5


# --- an offset is never recorded without the writes it covers -------------------------------


def test_an_offset_whose_writes_are_gone_is_not_recorded(
    harness: Harness, store: TransactionalStore
) -> None:
    """The partition was closed (its staged writes dropped) before its transaction's commit
    was applied: recording the offset alone would make recovery skip those writes for good."""
    commit(harness, store, 0, {b"kept": b"1"}, 3)
    harness.at(0)
    store[b"new"] = b"2"
    store.close_partition(0)

    store.commit_partition(0, 7)

    assert on_disk(store, 0) == {b"kept": b"1", OFFSET_KEY: through_marker(3)}
    assert store.persisted_offset(tp(0)) == 4  # recovery replays from here, "new" included


async def test_a_commit_after_the_store_stopped_records_nothing(
    harness: Harness, store: TransactionalStore
) -> None:
    """Faust stops the tables on shutdown; a commit applied after that must leave the database
    at its older offset (this lost ids on every graceful restart before the fix)."""
    commit(harness, store, 0, {b"kept": b"1"}, 3)
    harness.at(0)
    store[b"new"] = b"2"
    await store.on_stop()

    store.commit_partition(0, 7)

    assert on_disk(store, 0) == {b"kept": b"1", OFFSET_KEY: through_marker(3)}
