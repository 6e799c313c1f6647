"""What a bulk restore leaves on disk: compressed, whatever the number of its level-0 files.

A bulk restore flushes each write batch to level 0 uncompressed and compacts nothing while it
writes (``tables/rocks_options.py``); compaction compresses what it merges below level 0. A
restore of fewer write batches than RocksDB's level-0 trigger left files that no compaction
ever picked until the worker's own flushes added enough: a store restored from a changelog of
150,000 ids per partition took about twice the disk per id of one that had written them itself.
"""

from __future__ import annotations

import random
import time

import pytest

from tables import window
from tables.seen_ids.store import SeenIdsStore
from tests.unit.tables.seen_ids.support import World


def sst_bytes(store: SeenIdsStore) -> int:
    """Bytes of partition 0's table files (the ids and the store's other column families)."""
    return sum(f.stat().st_size for f in store.partition_path(0).glob("*.sst"))


@pytest.mark.parametrize("batches", [1, 3, 6])
def test_a_bulk_restore_ends_with_nothing_uncompressed_in_level_0(
    world: World, batches: int
) -> None:
    rnd = random.Random(batches)
    per_batch = 4_000
    # "id-" keeps the ids text on disk: bare hex would be packed (tables/keys.py) into
    # bytes that do not compress, and this test is about compression.
    writes = [
        (f"id-{rnd.getrandbits(128):032x}".encode(), window.encode_entry(1_000 + n, n))
        for n in range(batches * per_batch)
    ]
    bulk = world.new_store("bulk")
    assert bulk.begin_bulk(0, len(writes))
    for start in range(0, len(writes), per_batch):
        bulk.write_restored(0, writes[start : start + per_batch], start + per_batch - 1, wal=False)
        bulk.partition_db(0).db.flush(True)
    assert bulk.partition_db(0).db.property_int_value("rocksdb.num-files-at-level0") == batches
    uncompressed = sst_bytes(bulk)
    bulk.end_bulk(0)
    deadline = time.monotonic() + 30
    while bulk.compacting(0) and time.monotonic() < deadline:
        time.sleep(0.01)
    pdb = bulk.partition_db(0)
    assert not pdb.bulk and not bulk.compacting(0)
    assert pdb.db.property_int_value("rocksdb.num-files-at-level0") == 0
    # Compressed: random hex ids carry 4 bits in each 8-bit character, but the store's files
    # hold the same ids (and their index keys) in other, less compressible forms too, so the
    # saving is well short of half; level-0 files left as written would save nothing.
    assert sst_bytes(bulk) < 0.9 * uncompressed
    assert len(world.ids(bulk)) == len(writes)
