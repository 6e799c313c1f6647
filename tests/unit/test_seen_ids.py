"""Age-out in ``tables.seen_ids`` on a real RocksDB store: window, size cap (oldest first), seek
hint, effective window, and that rebuilding from the changelog gives the same ids, index and
summary as the live store."""

from __future__ import annotations

import random
import time
import types
from collections.abc import AsyncIterator
from pathlib import Path

import faust
import pytest

from app.settings import Settings
from tables import window
from tables.seen_ids import SeenIds
from tables.seen_ids_index import INDEX_CF, SeenIdsStore
from tables.source_offsets import SOURCE_OFFSETS_KEY, encode_source_offsets

BUCKET_MS = 1_000
WINDOW_MS = 10_000


class StoreTable:
    """What SeenIds needs of its table, over a real store; records the changelog it would send."""

    def __init__(self, store: SeenIdsStore) -> None:
        self.data = store
        self.changelog: list[tuple[int, bytes, bytes | None]] = []
        self.partition = 0

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        return self.data.get_in(self.partition if partition is None else partition, key)

    def put(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        p = self.partition if partition is None else partition
        self.data.stage(p, key, value)
        self.changelog.append((p, key, value))

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        self.put(key, None)


class World:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
        self.app = faust.App("t-seen", store="rocksdb://", datadir=str(tmp_path))
        self.tmp_path = tmp_path
        self.stores: list[SeenIdsStore] = []
        self.store = self.new_store("seen_ids")
        self.table = StoreTable(self.store)
        self.settings = Settings.from_env(
            {
                "DEDUPE_WINDOW": f"{WINDOW_MS}ms",
                "DEDUPE_BUCKET": f"{BUCKET_MS}ms",
                "DEDUPE_ALLOWED_LATENESS": "0",
                "DEDUPE_MIN_WINDOW": "0",
                **env,
            }
        )
        self.seen = SeenIds(self.table, self.settings)  # type: ignore[arg-type]
        self.offset = 0

    def new_store(self, name: str) -> SeenIdsStore:
        store = SeenIdsStore(
            "rocksdb://",
            self.app,
            types.SimpleNamespace(name=name),
            partition_of=lambda: self.table.partition,
            bucket_ms=BUCKET_MS,
            table_name=name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.stores.append(store)
        return store

    def first(self, id_bytes: bytes, t: int) -> bool:
        """Decide one record of the current partition: True for a first sighting."""
        return self.seen.decide(id_bytes, t, self.table.partition) is window.Verdict.FIRST

    def age_out(self, t: int) -> int:
        return self.seen.age_out(t, self.table.partition)

    def record(self, id_: str, t: int) -> bool:
        """Process one record (decide + age out) like the agent does."""
        first = self.first(id_.encode(), t)
        self.age_out(t)
        return first

    def commit(self) -> None:
        p = self.table.partition
        self.offset += 1
        self.store.commit_partition(p, self.offset)
        self.seen.commit_partition(p, self.offset)

    def ids(
        self, store: SeenIdsStore | None = None, partition: int = 0
    ) -> dict[bytes, window.Entry]:
        s = store or self.store
        return {k: window.Entry.decode(v) for k, v in s.db(partition).items()}

    def index(self, store: SeenIdsStore | None = None, partition: int = 0) -> list[bytes]:
        s = store or self.store
        return [k for k, _ in s.index(partition, b"")]


@pytest.fixture
async def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    w = World(tmp_path, monkeypatch)
    yield w
    for store in w.stores:
        await store.on_stop()


def test_repeats_inside_the_window_are_dropped_and_after_it_forwarded(world: World) -> None:
    assert world.record("a", 1_000)
    assert not world.record("a", 1_000 + WINDOW_MS - 1)
    world.commit()
    assert world.record("a", 1_000 + WINDOW_MS)  # W is outside: a new first sighting
    world.commit()
    assert world.ids()[b"a"].first_seen_ms == 1_000 + WINDOW_MS
    assert len(world.index()) == 1  # the old index entry went with the re-insert


def test_a_counted_repeat_keeps_its_one_index_entry_and_the_summary(world: World) -> None:
    assert world.record("a", 1_000)
    assert not world.record("a", 1_001)  # the first sighting and its repeat in one commit
    world.commit()
    index, summary = world.index(), world.store.summary(0)
    assert not world.record("a", 1_002)  # a repeat of a committed id
    assert not world.record("a", 1_003)
    world.commit()
    assert world.ids()[b"a"].repeats == 3
    assert world.index() == index and len(index) == 1
    assert world.store.summary(0) == summary and summary.held == 1


def test_expired_buckets_are_removed_with_tombstones_and_counted(world: World) -> None:
    for i in range(20):
        assert world.record(f"old-{i}", 500 + i)  # bucket [0, 1000)
    world.commit()
    assert world.store.summary(0).held == 20
    # stream time moves past the bucket's end + W: the next records age it out in batches
    world.record("new-0", BUCKET_MS + WINDOW_MS)
    for i in range(1, 5):
        world.record(f"new-{i}", BUCKET_MS + WINDOW_MS + i)
    world.commit()
    assert set(world.ids()) == {f"new-{i}".encode() for i in range(5)}
    assert world.store.summary(0).held == 5
    tombstones = [k for _, k, v in world.table.changelog if v is None]
    assert sorted(tombstones) == sorted(f"old-{i}".encode() for i in range(20))
    assert world.seen.expired[0] == 20 and not world.seen.evicted.get(0)


async def test_size_cap_evicts_oldest_first_and_reports_the_window(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, monkeypatch, DEDUPE_MAX_IDS_PER_PARTITION="10", DEDUPE_EVICTION_BATCH="2")
    try:
        for i in range(30):
            assert w.record(f"id-{i:02d}", 1_000 + 100 * i)  # 10 per second, inside the window
            w.commit()
        held = w.ids()
        assert sorted(held) == [f"id-{i:02d}".encode() for i in range(20, 30)]
        assert w.store.summary(0).held == 10
        assert w.seen.evicted[0] == 20
        # the oldest held was first seen at 1000 + 100*20; seen from the last record (3900):
        assert w.seen.effective_window_ms(0, 1_000 + 100 * 29) == 900
        # an evicted id is forwarded again; a held one is not
        assert w.record("id-05", 5_000)
        assert not w.record("id-25", 5_000)
    finally:
        for store in w.stores:
            await store.on_stop()


def test_the_seek_hint_skips_what_was_deleted(world: World) -> None:
    for i in range(10):
        world.record(f"x{i}", 100 + i)
    world.commit()
    world.record("late", 2 * BUCKET_MS + WINDOW_MS)  # ages out bucket 0
    world.commit()
    hint = world.store.summary(0).hint
    assert hint > window.index_key(109, BUCKET_MS, 9)  # past every deleted key
    assert all(k >= hint for k in world.index())


def test_a_late_first_sighting_below_the_hint_lowers_it(world: World) -> None:
    for i in range(5):
        world.record(f"x{i}", 100 + i)  # bucket 0
        world.record(f"y{i}", 1_100 + i)  # bucket 1
    world.commit()
    world.record("move", 3 * BUCKET_MS + WINDOW_MS)  # buckets 0..2 are out of the window
    world.commit()
    before = world.store.summary(0).hint
    assert before > window.index_key(1_104, BUCKET_MS, 9)
    late_key = window.index_key(600, BUCKET_MS, world.store.summary(0).next_seq)
    assert late_key < before
    assert world.record("late", 600)  # a first sighting in an old bucket (a late record)
    world.commit()
    assert world.store.summary(0).hint <= late_key  # so age-out will find it
    world.record("next", 3 * BUCKET_MS + WINDOW_MS + 1)
    world.commit()
    assert b"late" not in world.ids()


def test_a_discarded_transaction_leaves_no_trace(world: World) -> None:
    world.record("kept", 100)
    world.commit()
    world.record("dropped", 200)
    world.store.discard_partition(0)
    world.seen.discard_partition(0)
    assert set(world.ids()) == {b"kept"}
    assert world.store.summary(0).held == 1
    assert world.record("dropped", 300)  # never remembered: a first sighting again


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
    assert world.index(replica) == world.index()
    live, rebuilt = world.store.summary(0), replica.summary(0)
    assert (rebuilt.held, rebuilt.next_seq, rebuilt.newest_ms) == (
        live.held,
        live.next_seq,
        live.newest_ms,
    )
    assert INDEX_CF in replica.extra_cfs


def test_the_source_offsets_record_is_neither_an_id_nor_indexed(world: World) -> None:
    """Each transaction's source-offsets changelog record (tables.store.SOURCE_OFFSETS_KEY)
    goes to the store's bookkeeping, live and in recovery: ids, index and counts ignore it."""
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
        assert len(world.index(store)) == 1
        assert store.summary(0).held == 1
        assert store.source_offsets(0) == {"in": 3}


def test_uuid_ids_are_held_in_their_16_byte_form_and_read_back_as_written(world: World) -> None:
    """Canonical UUIDs are 17 bytes on disk, as the ids' keys and as the index's values
    (tables/keys.py); lookups, age-out, tombstones, items() and the index give the text."""
    uuids = [f"00000000-0000-4000-8000-{i:012x}".encode() for i in range(20)]
    for i, u in enumerate(uuids):
        assert world.first(u, 100 + i)
    assert not world.first(uuids[3], 200)  # a staged id, looked up
    world.commit()
    assert not world.first(uuids[4], 300)  # a committed id, looked up
    world.commit()
    db = world.store.db(0)
    assert {len(k) for k, _ in db.items()} == {17} and db.get(uuids[0]) is None
    assert {len(v) for _, v in world.store.partition_db(0).extra[INDEX_CF].items()} == {17}
    assert {id_ for _, id_ in world.store.index(0, b"")} == set(uuids)
    assert set(world.store._iterkeys()) == set(uuids)
    assert world.seen.committed_entry(0, uuids[4]) is not None
    world.record("late", 2 * BUCKET_MS + WINDOW_MS)  # ages all twenty out
    world.commit()
    assert [k for k, _ in db.items()] == [b"late"]
    assert sorted(k for _, k, v in world.table.changelog if v is None) == sorted(uuids)
    assert world.store.partition_db(0).stored_key_format() == 1


def test_a_uuid_state_rebuilt_from_the_changelog_is_the_same_on_disk(world: World) -> None:
    for i in range(30):
        world.first(f"00000000-0000-4000-8000-{i:012x}".encode(), 100 * i)
        world.age_out(100 * i)
        world.commit()
    replica = world.new_store("seen_ids_replica")
    for n, (_, key, value) in enumerate(world.table.changelog):
        replica.write_partition(0, [(key, value)], n)  # the changelog holds the text keys
    assert dict(replica.db(0).items()) == dict(world.store.db(0).items())
    index = replica.partition_db(0).extra[INDEX_CF]
    assert dict(index.items()) == dict(world.store.partition_db(0).extra[INDEX_CF].items())


def test_a_batch_with_several_writes_of_a_key_ends_as_its_writes_one_by_one(world: World) -> None:
    """A restore's batch can hold several changelog records of one key (a sighting, its
    repeats, its age-out, a new sighting): the store applies each key's last write against its
    committed value, and must end with the same ids, index and summary as after every write in
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
    assert world.index(batched) == world.index(one_by_one)
    a, b = one_by_one.summary(0), batched.summary(0)
    assert (b.held, b.next_seq, b.newest_ms) == (a.held, a.next_seq, a.newest_ms)
    assert b.held == len(world.ids(batched)) > 0
    assert not world.index(batched) or b.hint <= world.index(batched)[0]


def test_a_commit_reuses_what_its_transaction_read_and_encoded(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The commit's index upkeep needs the committed values its writes replace, and the keys'
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


def test_a_bulk_restore_into_an_empty_store_reads_back_only_keys_it_wrote(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into an empty database the restore reads back (for the index upkeep) only keys its own
    earlier batches may have written, and ends with the same ids, index and summary as writing
    every record in order; after the restore every key is read again."""
    from tables import staging

    rnd = random.Random(11)
    fresh = [f"{i:08x}-0000-4000-8000-{i:012x}".encode() for i in range(1_000)]
    again = [*fresh[:20], b"x", b"y"]
    writes: list[tuple[bytes, bytes | None]] = []
    for seq in range(1_600):
        key = fresh[seq] if seq < 1_000 else rnd.choice(again)
        roll = rnd.random()
        value = None if roll < 0.2 else window.encode_entry(rnd.randint(0, 20 * BUCKET_MS), seq)
        writes.append((key, value))
    one_by_one, bulk = world.new_store("one_by_one"), world.new_store("bulk")
    for n, write in enumerate(writes):
        one_by_one.write_partition(0, [write], n)
    read: list[bytes] = []
    real_multi_get = staging.multi_get
    monkeypatch.setattr(
        staging, "multi_get", lambda db, ks: read.extend(ks) or real_multi_get(db, ks)
    )
    assert bulk.begin_bulk(0, len(writes))
    for start in range(0, len(writes), 100):
        bulk.write_restored(0, writes[start : start + 100], start + 99, wal=False)
    bulk.end_bulk(0)
    assert world.ids(bulk) == world.ids(one_by_one)
    assert world.index(bulk) == world.index(one_by_one)
    a, b = one_by_one.summary(0), bulk.summary(0)
    assert (b.held, b.next_seq, b.newest_ms, b.hint) == (a.held, a.next_seq, a.newest_ms, a.hint)
    # Each of the 1,000 fresh keys first came in its own batch: none of them needed a read
    # but for a hash collision; the keys written again were read back.
    assert len(read) < 0.2 * len(writes)
    assert {bulk.disk_key(k) for k in again} & set(read)
    # After the restore (live commits) every key is read: a restored key is found and its
    # index entry replaced, not duplicated.
    read.clear()
    late = window.encode_entry(30 * BUCKET_MS, 5_000)
    for store in (one_by_one, bulk):
        store.write_partition(0, [(fresh[500], late)], 5_000)
    assert read == [bulk.disk_key(fresh[500])] * 2  # by each store
    assert world.index(bulk) == world.index(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)


def ids_option(store: SeenIdsStore, name: str, section: str = '[CFOptions "default"]') -> str:
    """An option of the ids' column family (or of another ``section``: "[DBOptions]") in the
    newest OPTIONS file RocksDB wrote for partition 0 ("": not there)."""
    store.partition_db(0)  # opened on first use
    files = store.partition_path(0).glob("OPTIONS-*")
    text = max(files, key=lambda f: int(f.name.split("-")[1])).read_text()
    default = text[text.index(section) :]
    default = default[: default.index("\n[", 1)]
    if f"  {name}=" not in default:
        return ""
    return default.split(f"  {name}=", 1)[1].split("\n", 1)[0].strip()


def memtable_factory(store: SeenIdsStore) -> str:
    """The ids' memtable factory in the newest OPTIONS file RocksDB wrote for partition 0."""
    factory = ids_option(store, "memtable_factory")
    return factory.removeprefix("{id=").split(";", 1)[0].strip()


def test_a_restore_into_an_empty_store_writes_through_vector_memtables(world: World) -> None:
    """Into an empty database the restore reopens it with vector memtables (keys appended and
    sorted once, at the flush), hands each batch's memtable to a flush right after the write, so
    no read meets the memtable being written, and reopens it with the usual skiplist at its end.
    Repeats of keys from earlier batches are read back and end as written one by one."""
    rnd = random.Random(5)
    keys = [f"{rnd.getrandbits(128):032x}".encode() for _ in range(300)]
    writes = [(k, window.encode_entry(1_000 + n, n)) for n, k in enumerate(keys)]
    writes += [(k, window.encode_entry(5 * BUCKET_MS, 300 + n)) for n, k in enumerate(keys[:40])]
    writes += [(k, None) for k in keys[40:60]]
    bulk, one_by_one = world.new_store("bulk"), world.new_store("one_by_one")
    for n, write in enumerate(writes):
        one_by_one.write_partition(0, [write], n)
    assert memtable_factory(bulk) == "SkipListFactory"
    assert bulk.begin_bulk(0, len(writes))
    assert bulk.partition_db(0).bulk and bulk.partition_db(0).restoring()
    assert memtable_factory(bulk) == "VectorRepFactory"
    # Flushes to level 0 uncompressed, the levels below as configured; no memtable filter.
    assert ids_option(bulk, "compression_per_level") == "kNoCompression" + ":kZSTD" * 6
    assert ids_option(bulk, "memtable_prefix_bloom_size_ratio") == "0.000000"
    # No compaction while the restore writes: each of its writes stays a level-0 file.
    assert ids_option(bulk, "disable_auto_compactions") == "true"
    for start in range(0, len(writes), 50):
        bulk.write_restored(0, writes[start : start + 50], start + 49, wal=False)
        db = bulk.partition_db(0).db
        assert db.property_int_value("rocksdb.num-entries-active-mem-table") == 0
        db.flush(True)  # the flush requested at each write, waited for here
    assert db.property_int_value("rocksdb.num-files-at-level0") == 8  # ceil(380 / 50)
    assert bulk.partition_db(0).compacting()  # 8 files: a compaction's worth, not started
    del db
    bulk.end_bulk(0)
    assert bulk.partition_db(0).bulk and not bulk.partition_db(0).restoring()
    assert ids_option(bulk, "max_subcompactions", "[DBOptions]") == "2"
    # RocksDB compacts level 0 in its own threads, still with the bulk options; once it is
    # done the database is opened again with the usual ones.
    deadline = time.monotonic() + 30
    while bulk.compacting(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    pdb = bulk.partition_db(0)
    assert not pdb.bulk and not pdb.restoring() and not bulk.compacting(0)
    assert pdb.db.property_int_value("rocksdb.num-files-at-level0") == 0
    assert memtable_factory(bulk) == "SkipListFactory"
    assert ids_option(bulk, "compression_per_level") == ""
    assert ids_option(bulk, "compression") == "kZSTD"
    assert ids_option(bulk, "disable_auto_compactions") == "false"
    assert ids_option(bulk, "max_subcompactions", "[DBOptions]") == "1"
    assert world.ids(bulk) == world.ids(one_by_one)
    assert world.index(bulk) == world.index(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)
    assert bulk.summary(0).held == 280


def test_batches_of_new_ids_take_the_whole_array_path_and_end_as_one_by_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes of new ids only, from ``FRESH_IN_BULK`` on, get their index keys and the
    summary's marks in whole-array steps: ids, index and summary end as written one by one,
    across buckets, first sightings below the hint, sequences with zero bytes at their end,
    entries with a content hash, entries of mixed lengths and batches with repeats (those two
    take the loop)."""
    from tables import seen_ids_index

    rnd = random.Random(17)
    n = seen_ids_index.FRESH_IN_BULK

    def fresh(
        count: int, seq0: int, content: bytes = b"", latest: int = 9 * BUCKET_MS
    ) -> list[tuple[bytes, bytes | None]]:
        return [
            (
                f"{rnd.getrandbits(128):032x}".encode(),
                window.encode_entry(rnd.randint(0, latest), seq0 + 256 * i, 0, content),
            )
            for i in range(count)
        ]

    batches = [
        fresh(n, 0, latest=20 * BUCKET_MS),  # the newest first sightings of all
        fresh(n + 7, 10**6, b"\x07" * 8),  # 28-byte entries
        fresh(n - 1, 2 * 10**6),  # below the threshold: the loop
    ]
    mixed = fresh(n, 3 * 10**6)
    mixed[5] = (mixed[5][0], mixed[5][1] + b"\x01" * 8)  # one longer entry: the loop
    batches.append(mixed)
    repeats = fresh(n, 4 * 10**6)
    old_key, old_value = batches[0][3]
    assert old_value is not None
    repeats[9] = (old_key, old_value[:16] + (1).to_bytes(4, "big"))  # a repeat counted
    batches.append(repeats)
    early = fresh(n, 5 * 10**6)
    early[0] = (early[0][0], window.encode_entry(0, 7))  # below every index key so far
    batches.append(early)

    took: list[bool] = []
    real = seen_ids_index.index_keys_of

    def spy(values: list[bytes], bucket_ms: int) -> window.IndexKeys | None:
        found = real(values, bucket_ms)
        took.append(found is not None)
        return found

    monkeypatch.setattr(seen_ids_index, "index_keys_of", spy)
    batched, one_by_one = world.new_store("batched"), world.new_store("one_by_one")
    hint = window.index_key(5 * BUCKET_MS, BUCKET_MS, 0)
    for store in (batched, one_by_one):  # age-out left a hint: the walk starts at bucket 5
        store.stage_hint(0, hint)
        store.write_partition(0, [(b"seed", window.encode_entry(6 * BUCKET_MS, 1))], 0)
        assert store.summary(0).hint == hint
    offset = 1
    for batch in batches:
        for write in batch:
            one_by_one.write_partition(0, [write], offset)
        offset += len(batch)
        batched.write_partition(0, batch, offset)
    assert took == [True, True, False, True]  # the batch with a repeat is not all new
    assert world.ids(batched) == world.ids(one_by_one)
    assert world.index(batched) == world.index(one_by_one)
    a, b = one_by_one.summary(0), batched.summary(0)
    assert (b.held, b.next_seq, b.newest_ms) == (a.held, a.next_seq, a.newest_ms)
    assert b.hint == a.hint == min(world.index(batched)) < hint
    assert b.held == sum(map(len, batches)) - 1 + 1  # a repeat, and the seed


def test_index_keys_of_many_entries_are_those_of_each() -> None:
    rnd = random.Random(3)
    for bucket_ms in (1, 7, 1000, 3_600_000):
        entries = [
            window.encode_entry(rnd.randrange(2**62), rnd.choice([0, 256, rnd.randrange(2**64)]))
            for _ in range(500)
        ]
        found = window.index_keys_of(entries, bucket_ms)
        assert found is not None
        expected = [window.index_key_of(e, bucket_ms) for e in entries]
        assert found.keys == expected
        assert found.lowest == min(expected)
        assert found.top_seq == max(e[8:16] for e in entries)
        assert found.newest == max(e[:8] for e in entries)
    assert window.index_keys_of([], 1) is None
    assert window.index_keys_of([b"x" * 20, b"x" * 21], 1) is None
    assert window.index_keys_of([b"x" * 15], 1) is None


def test_a_bulk_restore_ended_midway_keeps_its_prefix_on_disk(world: World) -> None:
    """A restore that a rebalance stopped, its partition now a standby here, is ended where it
    stopped (``recovery/follow.py``): what it wrote without the WAL is flushed and the mark
    cleared, so a reopened database keeps that prefix (it is not rebuilt), and writes with the
    WAL go on from it with the usual options."""
    rnd = random.Random(23)
    writes = [
        (f"{rnd.getrandbits(128):032x}".encode(), window.encode_entry(1_000 + n, n))
        for n in range(600)
    ]
    bulk, one_by_one = world.new_store("bulk"), world.new_store("one_by_one")
    for n, write in enumerate(writes):
        one_by_one.write_partition(0, [write], n)
    assert bulk.begin_bulk(0, len(writes))
    bulk.write_restored(0, writes[:300], 299, wal=False)
    bulk.end_bulk(0)  # stopped at offset 299 of 599
    assert not bulk.compacting(0)  # one level-0 file: nothing to compact
    pdb = bulk.partition_db(0)
    assert not pdb.bulk and not pdb.restoring() and pdb.offset() == 299
    assert memtable_factory(bulk) == "SkipListFactory"
    del pdb
    bulk.close_partition(0)  # a database opened marked would be emptied: this one is not
    assert bulk.restored_offset(0) == 299
    assert not bulk.begin_bulk(0, 300)  # it holds a prefix: the rest goes with the WAL
    bulk.write_restored(0, writes[300:], 599, wal=True)
    assert world.ids(bulk) == world.ids(one_by_one)
    assert world.index(bulk) == world.index(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)
