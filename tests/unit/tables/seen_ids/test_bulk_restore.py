"""The bulk restore into ``tables.seen_ids``: an empty store written through vector memtables and
the whole-array path, reading back only the keys it wrote, and a restore ended midway."""

from __future__ import annotations

import random
import time

import pytest

from tables import window
from tables.seen_ids.store import SeenIdsStore
from tests.unit.tables.seen_ids.support import BUCKET_MS, World


def test_a_bulk_restore_into_an_empty_store_reads_back_only_keys_it_wrote(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Into an empty database the restore reads back (for the count upkeep) only keys its own
    earlier batches may have written, and ends with the same ids, counts and summary as writing
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
    assert world.counts(bulk) == world.counts(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)
    # Each of the 1,000 fresh keys first came in its own batch: none of them needed a read
    # but for a hash collision; the keys written again were read back.
    assert len(read) < 0.2 * len(writes)
    assert {bulk.disk_key(k) for k in again} & set(read)
    # After the restore (live commits) every key is read: a restored key is found and its
    # count moved, not doubled.
    read.clear()
    late = window.encode_entry(30 * BUCKET_MS, 5_000)
    for store in (one_by_one, bulk):
        store.write_partition(0, [(fresh[500], late)], 5_000)
    assert read == [bulk.disk_key(fresh[500])] * 2  # by each store
    assert world.counts(bulk) == world.counts(one_by_one)
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
    assert world.counts(bulk) == world.counts(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)
    assert bulk.summary(0).held == 280


def test_batches_of_new_ids_take_the_whole_array_path_and_end_as_one_by_one(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes of new ids only, from ``FRESH_IN_BULK`` on, get their counts and the summary's
    marks in whole-array steps: ids, counts and summary end as written one by one, across
    slots, first sightings older than every other, sequences with zero bytes at their end,
    entries with a content hash, entries of mixed lengths and batches with repeats (those two
    take the loop)."""
    from tables.seen_ids import store as seen_ids_store

    rnd = random.Random(17)
    n = seen_ids_store.FRESH_IN_BULK

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
    early[0] = (early[0][0], window.encode_entry(0, 7))  # older than every id so far
    batches.append(early)

    took: list[bool] = []
    real = seen_ids_store.marks_of

    def spy(values: list[bytes], slot_ms: int, block: int) -> window.Marks | None:
        found = real(values, slot_ms, block)
        took.append(found is not None)
        return found

    monkeypatch.setattr(seen_ids_store, "marks_of", spy)
    batched, one_by_one = world.new_store("batched"), world.new_store("one_by_one")
    for store in (batched, one_by_one):
        store.write_partition(0, [(b"seed", window.encode_entry(6 * BUCKET_MS, 1))], 0)
    offset = 1
    for batch in batches:
        for write in batch:
            one_by_one.write_partition(0, [write], offset)
        offset += len(batch)
        batched.write_partition(0, batch, offset)
    assert took == [True, True, False, True]  # the batch with a repeat is not all new
    assert world.ids(batched) == world.ids(one_by_one)
    assert world.counts(batched) == world.counts(one_by_one)
    a, b = one_by_one.summary(0), batched.summary(0)
    assert (b.held, b.next_seq, b.newest_ms) == (a.held, a.next_seq, a.newest_ms)
    assert b == a
    assert b.held == sum(map(len, batches)) - 1 + 1  # a repeat, and the seed


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
    deadline = time.monotonic() + 30  # its one level-0 file is compacted (compressed) too
    while bulk.compacting(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    pdb = bulk.partition_db(0)
    assert pdb.db.property_int_value("rocksdb.num-files-at-level0") == 0
    assert not pdb.bulk and not pdb.restoring() and pdb.offset() == 299
    assert memtable_factory(bulk) == "SkipListFactory"
    del pdb
    bulk.close_partition(0)  # a database opened marked would be emptied: this one is not
    assert bulk.restored_offset(0) == 299
    assert not bulk.begin_bulk(0, 300)  # it holds a prefix: the rest goes with the WAL
    bulk.write_restored(0, writes[300:], 599, wal=True)
    assert world.ids(bulk) == world.ids(one_by_one)
    assert world.counts(bulk) == world.counts(one_by_one)
    assert bulk.summary(0) == one_by_one.summary(0)
