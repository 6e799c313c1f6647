"""``TransactionalStore``'s databases over their life: reopen, rebalance, reset, their paths; what
its listings show (no offset key, no staged writes); operations it does not support."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from rocksdict import Options, Rdict

from tables.rocks import META_CF, OFFSET_KEY
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
    through_marker,
    tp,
)


def locked_by_this_process(path: Path) -> bool:
    """True while some handle in this process holds the database open (RocksDB's LOCK)."""
    try:
        db = Rdict(
            str(path), Options(raw_mode=True), column_families={META_CF: Options(raw_mode=True)}
        )
    except Exception as exc:
        assert "lock" in str(exc).lower(), exc
        return True
    meta = db.get_column_family(META_CF)
    meta.close()
    db.close()
    return False


# --- restart ---------------------------------------------------------------------------------


@pytest.mark.parametrize("close", ["on_stop", "on_rebalance_to_nothing"])
async def test_committed_state_survives_reopen_staged_does_not(
    harness: Harness, store: TransactionalStore, close: str
) -> None:
    commit(harness, store, 0, {b"a": b"1"}, 7)
    commit(harness, store, 1, {b"b": b"2"}, 8)
    store.apply_changelog_batch([changelog_event(2, 30, b"c", b"3")], identity, identity)
    harness.at(0)
    store[b"staged-0"] = b"x"
    harness.at(3)
    store[b"staged-3"] = b"y"

    if close == "on_stop":
        await store.on_stop()
    else:
        await store.on_rebalance(set(), {tp(p) for p in range(4)}, set())

    reopened = harness.new_store()
    assert reopened.persisted_offset(tp(0)) == 8  # commit_partition: through the marker
    assert reopened.persisted_offset(tp(1)) == 9
    assert reopened.persisted_offset(tp(2)) == 30  # apply_changelog_batch: the last record
    assert reopened.persisted_offset(tp(3)) is None
    assert read(harness, reopened, 0, b"a") == b"1"
    assert read(harness, reopened, 1, b"b") == b"2"
    assert read(harness, reopened, 2, b"c") == b"3"
    assert read(harness, reopened, 0, b"staged-0") is None
    assert read(harness, reopened, 3, b"staged-3") is None
    assert sorted(reopened.keys()) == [b"a", b"b", b"c"]


# --- rebalance and reset ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("assigned", "kept"),
    [
        pytest.param({0, 1, 2, 3}, {0, 1, 2, 3}, id="all"),
        pytest.param({0, 2}, {0, 2}, id="some"),
        pytest.param({2, 7}, {2}, id="with-unopened"),
        pytest.param(set(), set(), id="none"),
    ],
)
async def test_on_rebalance_closes_unassigned_partitions(
    harness: Harness, store: TransactionalStore, assigned: set[int], kept: set[int]
) -> None:
    for p in range(4):
        commit(harness, store, p, {f"k{p}".encode(): b"v"}, p)
        harness.at(p)
        store[f"staged{p}".encode()] = b"s"

    await store.on_rebalance({tp(p) for p in assigned}, set(), set())

    for p in range(4):
        assert locked_by_this_process(store.partition_path(p)) is (p in kept), p
        assert store.staged_count(p) == (1 if p in kept else 0), p
    # Only databases that are open are listed.
    assert sorted(store.keys()) == sorted(f"k{p}".encode() for p in kept)
    # A closed partition opens again on use, with its committed data.
    assert read(harness, store, 1, b"k1") == b"v"


def test_reset_state_removes_the_databases(harness: Harness, store: TransactionalStore) -> None:
    for p in range(3):
        commit(harness, store, p, {b"a": b"1"}, 10 + p)
    harness.at(0)
    store[b"staged"] = b"s"
    paths = [store.partition_path(p) for p in range(3)]
    assert all(path.exists() for path in paths)

    store.reset_state()

    assert not any(path.exists() for path in paths)
    assert store.staged_count(0) == 0
    assert store.persisted_offset(tp(0)) is None
    assert read(harness, store, 1, b"a") is None


@pytest.mark.parametrize(
    "other_name",
    [
        "other",
        "seen_ids",
        "seen-v2",  # reset_state removes only '<table>-<digits>.db', not 'seen-v2-0.db'
    ],
)
async def test_reset_state_keeps_other_tables(harness: Harness, other_name: str) -> None:
    seen = harness.new_store("seen")
    other = harness.new_store(other_name)
    commit(harness, seen, 0, {b"a": b"1"}, 1)
    commit(harness, other, 0, {b"b": b"2"}, 2)
    await other.on_stop()  # closed, so removing its files cannot break the teardown
    seen.reset_state()
    assert not seen.partition_path(0).exists()
    assert on_disk(other, 0) == {b"b": b"2", OFFSET_KEY: through_marker(2)}


def test_partition_path_layout(store: TransactionalStore) -> None:
    assert store.partition_path(3) == store.directory / "seen-3.db"
    assert store.directory == Path(store.app.conf.tabledir)


# --- the offset key stays internal -----------------------------------------------------------


VIEWS: list[tuple[str, Callable[[TransactionalStore], Iterable[Any]]]] = [
    ("keys", lambda s: list(s.keys())),
    ("iter", lambda s: list(iter(s))),
    ("items", lambda s: [k for k, _ in s.items()]),
]


@pytest.mark.parametrize(("_view", "keys_of"), VIEWS, ids=[v[0] for v in VIEWS])
def test_offset_key_is_not_listed(
    harness: Harness,
    store: TransactionalStore,
    _view: str,
    keys_of: Callable[[TransactionalStore], Iterable[Any]],
) -> None:
    commit(harness, store, 0, {b"a": b"1"}, 3)
    store.apply_changelog_batch([changelog_event(1, 9, b"b", b"2")], identity, identity)
    assert OFFSET_KEY in on_disk(store, 0)
    assert sorted(keys_of(store)) == [b"a", b"b"]


def test_values_do_not_include_the_offset(harness: Harness, store: TransactionalStore) -> None:
    commit(harness, store, 0, {b"a": b"1"}, 3)
    assert list(store.values()) == [b"1"]
    assert dict(store.items()) == {b"a": b"1"}


def test_listing_shows_committed_not_staged(harness: Harness, store: TransactionalStore) -> None:
    commit(harness, store, 0, {b"a": b"1"}, 3)
    harness.at(0)
    store[b"staged"] = b"2"
    assert list(store.keys()) == [b"a"]


def test_offset_key_is_not_readable_as_a_table_key(
    harness: Harness, store: TransactionalStore
) -> None:
    """The offset lives in META_CF, so it is never read as an id, and an id whose bytes equal
    OFFSET_KEY (any byte string is a valid messageId) is an ordinary id."""
    first_seen = (1_700_000_000_000).to_bytes(8, "big")  # a table value, unlike any offset here
    commit(harness, store, 0, {b"a": b"1"}, 3)
    harness.at(0)
    assert OFFSET_KEY not in store
    assert read(harness, store, 0, OFFSET_KEY) is None

    # Staged: visible to its partition, nothing on disk changes yet.
    harness.at(0)
    store[OFFSET_KEY] = first_seen
    assert OFFSET_KEY in store
    assert read(harness, store, 0, OFFSET_KEY) == first_seen
    assert on_disk_split(store, 0) == ({b"a": b"1"}, through_marker(3))
    assert store.persisted_offset(tp(0)) == 4

    # Committed: an ordinary id next to the offset, neither overwriting the other.
    store.commit_partition(0, 5)
    assert store.staged_count(0) == 0
    assert on_disk_split(store, 0) == ({b"a": b"1", OFFSET_KEY: first_seen}, through_marker(5))
    assert store.persisted_offset(tp(0)) == 6
    harness.at(0)
    assert OFFSET_KEY in store
    assert read(harness, store, 0, OFFSET_KEY) == first_seen
    assert sorted(store.keys()) == sorted([b"a", OFFSET_KEY])
    assert dict(store.items()) == {b"a": b"1", OFFSET_KEY: first_seen}

    # Moving the offset leaves the id alone, and deleting the id leaves the offset alone.
    store.set_persisted_offset(tp(0), 40)
    assert read(harness, store, 0, OFFSET_KEY) == first_seen
    commit(harness, store, 0, {OFFSET_KEY: None}, 41)
    assert read(harness, store, 0, OFFSET_KEY) is None
    assert on_disk_split(store, 0) == ({b"a": b"1"}, through_marker(41))
    assert store.persisted_offset(tp(0)) == 42

    # Recovery replays such an id from the changelog like any other.
    store.apply_changelog_batch(
        [changelog_event(1, 20, OFFSET_KEY, first_seen)], identity, identity
    )
    assert on_disk_split(store, 1) == ({OFFSET_KEY: first_seen}, offset_bytes(20))
    assert store.persisted_offset(tp(1)) == 20
    assert read(harness, store, 1, OFFSET_KEY) == first_seen


# --- unsupported operations ------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda s: s.clear(), id="clear"),
        pytest.param(lambda s: s.restore_backup(0), id="restore_backup"),
    ],
)
def test_unsupported_operations_raise(
    store: TransactionalStore, call: Callable[[TransactionalStore], Any]
) -> None:
    with pytest.raises(NotImplementedError):
        call(store)


async def test_backup_partition_is_unsupported(store: TransactionalStore) -> None:
    with pytest.raises(NotImplementedError):
        await store.backup_partition(0)
