"""``tables.seen_ids`` rebuilt from its changelog gives the same ids, counts and summary as the
live store: the source-offsets record, UUID ids in their 16-byte form, several writes of a key
in one batch, and a commit reusing what its transaction read."""

from __future__ import annotations

import random
import types

import pytest

from tables import keys, window
from tables.seen_ids.store import SeenIdsStore
from tables.source_offsets import SOURCE_OFFSETS_KEY, encode_source_offsets
from tests.unit.tables.seen_ids.support import BUCKET_MS, WINDOW_MS, World


def test_rebuilding_from_the_changelog_gives_the_same_state(world: World) -> None:
    for i in range(50):
        world.record(f"id-{i}", 100 * i)
        if i % 7 == 0:
            world.record(f"id-{i // 2}", 100 * i)  # repeats
        world.commit()
    replica = world.new_store("seen_ids_replica")

    class Msg:
        def __init__(self, offset: int, key: bytes, value: bytes | None) -> None:
            self.partition, self.offset, self.key, self.value = 0, offset, key, value

    events = [
        types.SimpleNamespace(message=Msg(n, k, v))
        for n, (_, k, v) in enumerate(world.table.changelog)
    ]
    for start in range(0, len(events), 13):  # recovery applies batches
        replica.apply_changelog_batch(events[start : start + 13], None, None)  # type: ignore[arg-type]
    assert world.ids(replica) == world.ids()
    assert world.counts(replica) == world.counts()
    live, rebuilt = world.store.summary(0), replica.summary(0)
    assert (rebuilt.held, rebuilt.next_seq, rebuilt.newest_ms) == (
        live.held,
        live.next_seq,
        live.newest_ms,
    )
    assert replica.extra_cfs == ()  # nothing but the ids and the bookkeeping


def test_the_source_offsets_record_is_neither_an_id_nor_counted(world: World) -> None:
    """Each transaction's source-offsets changelog record (tables.store.SOURCE_OFFSETS_KEY)
    goes to the store's bookkeeping, live and in recovery: the ids and their counts ignore it."""
    assert world.record("a", 1_000)
    world.store.stage_source_offsets(0, encode_source_offsets({"in": 3}))
    world.commit()
    rebuilt = world.new_store("rebuilt")
    rebuilt.write_partition(
        0,
        [
            (b"a", world.store.db(0)[b"a"]),
            (SOURCE_OFFSETS_KEY, encode_source_offsets({"in": 3})),
        ],
        5,
    )
    for store in (world.store, rebuilt):
        assert set(world.ids(store)) == {b"a"}
        assert world.counts(store) == {world.rank(1_000, 0): 1}
        assert store.summary(0).held == 1
        assert store.source_offsets(0) == {"in": 3}


def test_uuid_ids_are_held_in_their_16_byte_form_and_read_back_as_written(world: World) -> None:
    """Canonical UUIDs are 17 bytes on disk (tables/keys.py); lookups, age-out, tombstones and
    items() give the text."""
    uuids = [f"00000000-0000-4000-8000-{i:012x}".encode() for i in range(20)]
    for i, u in enumerate(uuids):
        assert world.first(u, 100 + i)
    assert not world.first(uuids[3], 200)  # a staged id, looked up
    world.commit()
    assert not world.first(uuids[4], 300)  # a committed id, looked up
    world.commit()
    db = world.store.db(0)
    assert {len(k) for k, _ in db.items()} == {17} and db.get(uuids[0]) is None
    assert set(world.store._iterkeys()) == set(uuids)
    assert world.seen.committed_entry(0, uuids[4]) is not None
    world.record("late", 2 * BUCKET_MS + WINDOW_MS)  # ages all twenty out
    world.commit()
    assert [k for k, _ in db.items()] == [b"late"]
    assert sorted(k for _, k, v in world.table.changelog if v is None) == sorted(uuids)
    assert world.store.partition_db(0).stored_key_format() == keys.FORMAT == 3


def test_a_uuid_state_rebuilt_from_the_changelog_is_the_same_on_disk(world: World) -> None:
    for i in range(30):
        world.first(f"00000000-0000-4000-8000-{i:012x}".encode(), 100 * i)
        world.age_out(100 * i)
        world.commit()
    replica = world.new_store("seen_ids_replica")
    for n, (_, key, value) in enumerate(world.table.changelog):
        replica.write_partition(0, [(key, value)], n)  # the changelog holds the text keys
    assert dict(replica.db(0).items()) == dict(world.store.db(0).items())
    assert world.counts(replica) == world.counts()


def test_a_batch_with_several_writes_of_a_key_ends_as_its_writes_one_by_one(world: World) -> None:
    """A restore's batch can hold several changelog records of one key (a sighting, its
    repeats, its age-out, a new sighting): the store applies each key's last write against its
    committed value, and must end with the same ids, counts and summary as after every write in
    order."""
    rnd = random.Random(7)
    keys = [f"00000000-0000-4000-8000-{i:012x}".encode() for i in range(6)] + [b"x", b"y"]
    writes: list[tuple[bytes, bytes | None]] = []
    last: dict[bytes, bytes | None] = {}
    for seq in range(400):
        key = rnd.choice(keys)
        old, roll = last.get(key), rnd.random()
        if roll < 0.25:
            value = None
        elif roll < 0.5 and old is not None:
            value = old[:16] + rnd.randint(1, 9).to_bytes(4, "big")  # a repeat counted
        else:
            value = window.encode_entry(rnd.randint(0, 20 * BUCKET_MS), seq)
        writes.append((key, value))
        last[key] = value
    one_by_one, batched = world.new_store("one_by_one"), world.new_store("batched")
    for n, write in enumerate(writes):
        one_by_one.write_partition(0, [write], n)
    for start in range(0, len(writes), 50):
        batched.write_partition(0, writes[start : start + 50], start + 49)
    assert world.ids(batched) == world.ids(one_by_one)
    assert world.counts(batched) == world.counts(one_by_one)
    a, b = one_by_one.summary(0), batched.summary(0)
    assert (b.held, b.next_seq, b.newest_ms) == (a.held, a.next_seq, a.newest_ms)
    assert b.held == len(world.ids(batched)) == sum(world.counts(batched).values()) > 0


def test_a_commit_reuses_what_its_transaction_read_and_encoded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's count upkeep needs the committed values its writes replace, and the keys'
    disk forms: a prefetched batch has both already, so the commit neither reads the database
    nor encodes a key again (before: one more multi-get and two more encodings per id)."""
    from tables import keys, staging

    uuids = [f"00000000-0000-4000-8000-{i:012x}".encode() for i in range(10)]
    world.store.prefetch(0, uuids)
    for i, u in enumerate(uuids):
        assert world.first(u, 100 + i)
    reads: list[int] = []
    encodings: list[bytes] = []
    real_multi_get, real_to_disk = staging.multi_get, keys.to_disk
    monkeypatch.setattr(
        staging, "multi_get", lambda db, ks: reads.append(len(ks)) or real_multi_get(db, ks)
    )
    monkeypatch.setattr(
        SeenIdsStore, "disk_key", staticmethod(lambda k: encodings.append(k) or real_to_disk(k))
    )
    world.commit()
    assert reads == [] and encodings == []
    assert set(world.store._iterkeys()) == set(uuids)
