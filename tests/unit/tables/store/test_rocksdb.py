"""``TransactionalStore``'s RocksDB options as the databases report them: one memtable budget for
all partitions, partitioned filters and index, the ids' memtable bloom filter."""

from __future__ import annotations

import time

from tables.rocks import META_CF
from tables.rocks_options import MEMTABLE_BLOOM_RATIO, RocksTuning
from tables.store import TransactionalStore
from tests.unit.tables.store.support import Harness

# --- RocksDB tuning ----------------------------------------------------------------------------


def fill(harness: Harness, store: TransactionalStore, partitions: int, keys: int) -> list[int]:
    """Commit ``keys`` 100-byte values into each partition; each partition's memtable bytes
    after."""
    for p in range(partitions):
        harness.at(p)
        for i in range(keys):
            store[b"k%d-%08d" % (p, i)] = b"v" * 100
            if i % 1000 == 999:
                store.commit_partition(p, i)
    # The flushes the budget triggers run in RocksDB's background threads, and memtables count
    # until their flush ends: on a busy machine, wait for them (or give up after 30 s).
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(
        (store.partition_db(p).db.property_int_value(prop) or 0) > 0
        for p in range(partitions)
        for prop in ("rocksdb.mem-table-flush-pending", "rocksdb.num-running-flushes")
    ):
        time.sleep(0.05)
    return [
        store.partition_db(p).db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
        for p in range(partitions)
    ]


def test_the_memtables_of_all_partitions_share_one_budget(harness: Harness) -> None:
    """~4.8 MB of keys and values per partition, far below one 64 MiB memtable: without a
    shared budget each partition keeps all of it in memory; with a 2 MiB budget RocksDB
    flushes a partition's memtable once the memtables of all partitions together pass (7/8
    of) it, so memtable memory stays near the budget per partition however much is written.
    Only the partition being written is flushed (an idle one keeps what it has), so the total
    settles anywhere up to about one budget per partition, depending on when the background
    flushes ran: a bound of 2x the budget on the total failed 2 runs in 5 on a loaded
    machine, and a partition can end a few KiB over the budget (arena blocks)."""
    budget = 2 * 1024 * 1024
    small = harness.new_store("small", RocksTuning(memtable_budget_bytes=budget))
    large = harness.new_store("large", RocksTuning(memtable_budget_bytes=256 * 1024 * 1024))
    in_small = fill(harness, small, partitions=4, keys=40_000)
    in_large = fill(harness, large, partitions=4, keys=40_000)
    assert all(size > 2 * budget for size in in_large), in_large
    assert all(size < 1.25 * budget for size in in_small), in_small
    assert sum(in_small) < sum(in_large) / 3, (in_small, in_large)
    # and nothing was lost by the early flushes
    harness.at(3)
    assert small[b"k3-00039999"] == b"v" * 100
    assert sum(1 for _ in small.partition_db(0).db.items()) == 40_000


def test_filters_and_index_are_partitioned(harness: Harness, store: TransactionalStore) -> None:
    fill(harness, store, partitions=1, keys=20_000)
    db = store.partition_db(0).db
    db.flush()
    props = db.property_value("rocksdb.aggregated-table-properties") or ""
    partitions = int(props.split("# index partitions=")[1].split(";")[0])
    assert partitions > 1, props


def test_the_ids_memtable_has_a_bloom_filter_and_bookkeeping_does_not(
    store: TransactionalStore,
) -> None:
    """Lookups of ids not held (every first sighting) skip the memtable's skiplist: the ids'
    column family has a whole-key memtable bloom filter; the bookkeeping family, read once per
    commit, does not pay for one. Read back from the OPTIONS file RocksDB writes."""
    store.partition_db(0)
    options = max(store.partition_path(0).glob("OPTIONS-*"))
    sections: dict[str, dict[str, str]] = {}
    section = ""
    for line in options.read_text().splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
            sections[section] = {}
        elif "=" in line and section:
            key, _, value = line.partition("=")
            sections[section][key] = value
    ids = sections['[CFOptions "default"]']
    meta = sections[f'[CFOptions "{META_CF}"]']
    assert ids["memtable_whole_key_filtering"] == "true"
    assert float(ids["memtable_prefix_bloom_size_ratio"]) == MEMTABLE_BLOOM_RATIO
    assert meta["memtable_whole_key_filtering"] == "false"
    assert float(meta["memtable_prefix_bloom_size_ratio"]) == 0
