"""``TransactionalStore``'s staged writes: visible only to their partition, not on disk until
commit, discarded with the transaction; reads through them; the changelog records they make."""

from __future__ import annotations

import pytest

from tables.rocks import OFFSET_KEY
from tables.store import TransactionalStore
from tests.unit.tables.store.support import (
    Harness,
    changelog_event,
    commit,
    identity,
    on_disk,
    read,
    through_marker,
    tp,
)

# --- staged writes ---------------------------------------------------------------------------


@pytest.mark.parametrize(("write_p", "read_p"), [(0, 0), (3, 3), (0, 1), (2, 0)])
def test_staged_writes_are_visible_only_to_their_partition(
    harness: Harness, store: TransactionalStore, write_p: int, read_p: int
) -> None:
    harness.at(write_p)
    store[b"id-1"] = b"v1"
    same = write_p == read_p
    assert read(harness, store, read_p, b"id-1") == (b"v1" if same else None)
    harness.at(read_p)
    assert (b"id-1" in store) is same
    assert store.staged_count(write_p) == 1
    assert store.staged_count(read_p) == (1 if same else 0)


def test_staged_writes_are_not_on_disk_until_commit(
    harness: Harness, store: TransactionalStore
) -> None:
    harness.at(2)
    store[b"id-1"] = b"v1"
    store[b"id-2"] = b"v2"
    assert read(harness, store, 2, b"id-1") == b"v1"
    assert on_disk(store, 2) == {}
    assert store.persisted_offset(tp(2)) is None

    store.commit_partition(2, 41)

    assert store.staged_count(2) == 0
    assert on_disk(store, 2) == {b"id-1": b"v1", b"id-2": b"v2", OFFSET_KEY: through_marker(41)}
    assert store.persisted_offset(tp(2)) == 42
    assert read(harness, store, 2, b"id-1") == b"v1"


def test_staged_delete_hides_committed_value_before_commit(
    harness: Harness, store: TransactionalStore
) -> None:
    commit(harness, store, 0, {b"a": b"1"}, 5)
    harness.at(0)
    del store[b"a"]
    assert read(harness, store, 0, b"a") is None
    assert on_disk(store, 0)[b"a"] == b"1"
    store.commit_partition(0, 6)
    assert b"a" not in on_disk(store, 0)


def test_later_staged_write_to_same_key_wins(harness: Harness, store: TransactionalStore) -> None:
    harness.at(0)
    store[b"a"] = b"1"
    store[b"a"] = b"2"
    del store[b"b"]
    store[b"b"] = b"3"
    assert store.staged_count(0) == 2
    store.commit_partition(0, 9)
    assert on_disk(store, 0) == {b"a": b"2", b"b": b"3", OFFSET_KEY: through_marker(9)}


# --- discard ---------------------------------------------------------------------------------


def test_discard_partition_drops_staged_writes(harness: Harness, store: TransactionalStore) -> None:
    commit(harness, store, 0, {b"kept": b"1"}, 2)
    harness.at(0)
    store[b"new"] = b"2"
    del store[b"kept"]
    harness.at(1)
    store[b"other"] = b"3"

    store.discard_partition(0)

    assert store.staged_count(0) == 0
    assert read(harness, store, 0, b"new") is None
    assert read(harness, store, 0, b"kept") == b"1"
    assert read(harness, store, 1, b"other") == b"3"  # other partitions keep theirs
    store.commit_partition(0, None)
    assert on_disk(store, 0) == {b"kept": b"1", OFFSET_KEY: through_marker(2)}
    assert store.persisted_offset(tp(0)) == 3


def test_prefetched_reads_match_point_reads_and_the_staged_writes(
    harness: Harness, store: TransactionalStore
) -> None:
    commit(harness, store, 0, {b"a": b"1", b"b": b"2"}, 5)
    harness.at(0)
    store[b"b"] = b"22"  # staged before the prefetch: the staged value wins
    store.prefetch(0, [b"a", b"b", b"c", b"a"])
    assert [read(harness, store, 0, k) for k in (b"a", b"b", b"c")] == [b"1", b"22", None]
    store[b"c"] = b"3"
    del store[b"a"]
    assert [read(harness, store, 0, k) for k in (b"a", b"b", b"c")] == [None, b"22", b"3"]
    # The index upkeep at the commit sees the committed values, not the staged ones.
    assert store.committed(0, [b"c", b"a", b"b", b"z"])[1] == [None, b"1", b"2", None]


@pytest.mark.parametrize("ending", ["commit", "discard", "recovery"])
def test_values_read_in_a_transaction_are_forgotten_when_it_ends(
    harness: Harness, store: TransactionalStore, ending: str
) -> None:
    """A committed value read (and remembered) in one transaction must not answer a lookup
    after that transaction's writes, its discard, or a changelog batch changed the database."""
    commit(harness, store, 0, {b"a": b"1"}, 5)
    harness.at(0)
    store.prefetch(0, [b"a", b"b"])
    assert read(harness, store, 0, b"b") is None
    if ending == "commit":
        store[b"a"] = b"9"
        store[b"b"] = b"8"
        store.commit_partition(0, 6)
        expected = {b"a": b"9", b"b": b"8"}
    elif ending == "discard":
        store[b"a"] = b"9"
        store.discard_partition(0)
        store.apply_changelog_batch([changelog_event(0, 6, b"b", b"7")], identity, identity)
        expected = {b"a": b"1", b"b": b"7"}
    else:
        store.apply_changelog_batch(
            [changelog_event(0, 6, b"a", None), changelog_event(0, 7, b"b", b"7")],
            identity,
            identity,
        )
        expected = {b"a": None, b"b": b"7"}
    for key, value in expected.items():
        assert read(harness, store, 0, key) == value
    assert store.committed(0, list(expected))[1] == list(expected.values())


def test_discard_of_untouched_partition_is_harmless(store: TransactionalStore) -> None:
    store.discard_partition(7)
    assert store.staged_count(7) == 0


def test_the_changelog_records_are_the_staged_writes_one_per_key(
    store: TransactionalStore,
) -> None:
    """What the commit pulls: the open transaction's last write per key (a repeat of an id
    inside one transaction is one changelog record), deletes as None, never the
    source-offsets record (the commit sends that itself)."""
    s = store
    s.stage(0, b"a", b"1")
    s.stage(0, b"a", b"2")
    s.stage(0, b"b", None)
    s.stage(1, b"c", b"3")
    s.stage_source_offsets(0, b"{}")
    assert s.changelog_records(0) == [(b"a", b"2"), (b"b", None)]
    assert s.changelog_records(1) == [(b"c", b"3")]
    assert s.changelog_records(2) == []
    s.discard_partition(0)
    assert s.changelog_records(0) == []
