"""The phases of the scale benchmark (bench/scale.py), each a function on one worker's
``seen_ids`` store: load the ids through the store's write path, compact every partition and
measure the disk, and measure lookups three ways."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from bench.scale_ids import SPAN_MS, T0, first_seen_ms, sample_by_partition
from bench.scale_measure import memory, mib, rate, read_bytes, rocksdb_memory

if TYPE_CHECKING:
    from collections.abc import Callable

    from app.settings import Settings
    from tables.seen_ids.store import SeenIdsStore

#: Staged writes are discarded (as after an aborted transaction) every this many decisions, so
#: the lookup phase leaves the store at exactly the ids loaded.
DISCARD_EVERY = 1_000
METHODS = ("decide", "table lookup", "raw rocksdict get")
#: RocksDB's size of one column family's live SST files.
SST_SIZE = "rocksdb.total-sst-files-size"


@dataclass
class Lookups:
    """Rates (ids/s) per partition for one kind of id (new or held) and one method."""

    per_partition: list[float] = field(default_factory=list)
    total: float = 0.0
    #: Bytes the process read (``rchar``: page cache or disk) during the measurement.
    read: int = 0


@dataclass
class Loaded:
    """What the load phase measured."""

    seconds: float
    read: int
    hwm: int
    rss: int
    held: list[int]
    rocksdb: dict[str, int]


@dataclass
class Compacted:
    """What the compaction phase measured (sizes in bytes)."""

    seconds: float
    sst: int
    allocated: int
    id_sst: int
    #: SST bytes of each column family but the ids' (the bookkeeping, ``meta``), by name.
    cf_sst: dict[str, int]
    hwm: int
    rss: int


class _Table:
    """The table surface SeenIds uses, straight on the store (no Kafka in this benchmark)."""

    def __init__(self, store: object) -> None:
        self.data = store

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        if partition is None:
            partition = self.data._partition_of()  # type: ignore[attr-defined]
        value: bytes | None = self.data.get_in(partition, key)  # type: ignore[attr-defined]
        return value

    def put(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        if partition is None:
            partition = self.data._partition_of()  # type: ignore[attr-defined]
        self.data.stage(partition, key, value)  # type: ignore[attr-defined]

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        self.put(key, None)


def load(
    store: SeenIdsStore,
    current: list[int],
    ids: int,
    partitions: int,
    batch: int,
    id_of: Callable[[int], bytes],
) -> Loaded:
    """Stage each id ``id_of(i)`` in its partition (``current[0]`` is the store's partition),
    commit a partition every ``batch`` ids, then what is left staged."""
    from app.rules import partition_for
    from tables.window import Entry, block_start

    print(f"loading {ids:,} ids into {partitions} partitions", flush=True)
    read_start = read_bytes()
    started = time.perf_counter()
    seqs = [0] * partitions
    offsets = [0] * partitions
    for i in range(ids):
        key = id_of(i)
        p = partition_for(key, partitions)
        current[0] = p
        # The entry as the worker writes it: its block's start for the sequence.
        store.set_raw(key, Entry(first_seen_ms(i, ids), block_start(seqs[p], store.block)).encode())
        seqs[p] += 1
        if seqs[p] % batch == 0:
            offsets[p] += batch
            store.commit_partition(p, offsets[p] - 1)
        if (i + 1) % 1_000_000 == 0:
            elapsed = time.perf_counter() - started
            hwm, rss = memory()
            print(
                f"  loaded {i + 1:,} ids  {rate(i + 1, elapsed):,.0f} ids/s  "
                f"{elapsed:,.0f}s  RSS {mib(rss)} (peak {mib(hwm)})",
                flush=True,
            )
    for p in range(partitions):
        staged = store.staged_count(p)
        if staged:
            offsets[p] += staged
            store.commit_partition(p, offsets[p] - 1)
    load_s = time.perf_counter() - started
    load_read = read_bytes() - read_start
    hwm_load, rss_load = memory()
    held = [store.summary(p).held for p in range(partitions)]
    assert sum(held) == ids, (sum(held), ids)
    mem_load = rocksdb_memory(store, partitions)
    print(f"loaded in {load_s:,.0f}s; compacting", flush=True)
    return Loaded(load_s, load_read, hwm_load, rss_load, held, mem_load)


def compact(store: SeenIdsStore, partitions: int) -> Compacted:
    """Compact every partition's databases, then measure the disk they take."""
    from bench.measure import disk_bytes

    started = time.perf_counter()
    for p in range(partitions):
        pdb = store.partition_db(p)
        pdb.db.compact_range(None, None)
        for cf in (pdb.meta, *pdb.extra.values()):
            cf.compact_range(None, None)
    compact_s = time.perf_counter() - started
    sst = sum(
        f.stat().st_size for p in range(partitions) for f in store.partition_path(p).rglob("*.sst")
    )
    allocated = sum(disk_bytes(store.partition_path(p)) for p in range(partitions))
    id_sst = 0
    cf_sst: dict[str, int] = {}
    for p in range(partitions):
        pdb = store.partition_db(p)
        id_sst += pdb.db.property_int_value(SST_SIZE) or 0
        for name, cf in (("meta", pdb.meta), *pdb.extra.items()):
            cf_sst[name] = cf_sst.get(name, 0) + (cf.property_int_value(SST_SIZE) or 0)
    hwm_compact, rss_compact = memory()
    print(f"compacted in {compact_s:,.0f}s; sampling lookup ids", flush=True)
    return Compacted(compact_s, sst, allocated, id_sst, cf_sst, hwm_compact, rss_compact)


def measure_lookups(
    store: SeenIdsStore,
    current: list[int],
    settings: Settings,
    ids: int,
    partitions: int,
    lookups: int,
    id_of: Callable[[int], bytes],
) -> dict[tuple[str, str], Lookups]:
    """Look up ``lookups`` ids per partition, new and held, each of the three ``METHODS``."""
    from app.rules import partition_for
    from tables.seen_ids import SeenIds
    from tables.window import Verdict

    part = lambda key: partition_for(key, partitions)  # noqa: E731
    rng = random.Random(7)
    fresh = iter(range(ids, 2**63))

    def sample(kind: str) -> list[list[bytes]]:
        """The ids of one pass, built just before it (so the harness's own lists, ~60 MiB
        per pass at 100,000 per partition, do not add up in the RSS figures)."""
        numbers = fresh if kind == "new" else iter(lambda: rng.randrange(ids), -1)
        return sample_by_partition(numbers, partitions, lookups, part, id_of)

    # Warm-up: index and filter blocks into the cache, as in a worker that has been running.
    warm = sample_by_partition(iter(lambda: rng.randrange(ids), -1), partitions, 5_000, part, id_of)
    for p in range(partitions):
        db = store.db(p)
        for key in warm[p]:
            db.get(store.disk_key(key))
    print("measuring lookups", flush=True)
    table = _Table(store)
    seen = SeenIds(table, settings)  # type: ignore[arg-type]
    decide_ms = T0 + SPAN_MS + 1  # after every first sighting, inside the window of all
    results: dict[tuple[str, str], Lookups] = {}
    for kind in ("new", "held"):
        for method in METHODS:
            out = results[kind, method] = Lookups()
            total_s = 0.0
            found = 0
            pass_keys = sample(kind)
            for p in range(partitions):
                keys = pass_keys[p]
                current[0] = p
                db = store.db(p)
                # The raw gets use the database's own key form (``tables/keys.py``),
                # encoded before the clock starts.
                disk_keys = [store.disk_key(k) for k in keys]
                read_before = read_bytes()
                t = time.perf_counter()
                if method == "raw rocksdict get":
                    for key in disk_keys:
                        if db.get(key) is not None:
                            found += 1
                elif method == "table lookup":
                    for key in keys:
                        if table.lookup(key) is not None:
                            found += 1
                    store.discard_partition(p)  # forget the values read (as a commit does)
                else:
                    for j, key in enumerate(keys, 1):
                        if seen.decide(key, decide_ms, p) is not Verdict.FIRST:
                            found += 1
                        if j % DISCARD_EVERY == 0:
                            store.discard_partition(p)
                            seen.discard_partition(p)
                    store.discard_partition(p)
                    seen.discard_partition(p)
                dt = time.perf_counter() - t
                out.read += read_bytes() - read_before
                total_s += dt
                out.per_partition.append(rate(len(keys), dt))
            del pass_keys, keys
            out.total = rate(lookups * partitions, total_s)
            expected = lookups * partitions if kind == "held" else 0
            assert found == expected, (kind, method, found, expected)
            print(f"  {kind:>4} ids, {method}: {out.total:,.0f} ids/s", flush=True)
    return results
