"""Scale benchmark: lookups, memory and disk with 50M ids held across a worker's partitions.

    python -m bench.scale                              # 50,000,000 ids over 8 partitions
    python -m bench.scale --ids 5000000 --lookups 20000  # quicker
    make bench-scale BENCH_SCALE_ARGS="--ids 5000000"

No broker. It loads N ids already held into one worker's ``seen_ids`` store, one RocksDB per
partition (``--partitions``, default ``DEDUPE_PARTITIONS``), through the store's own write path:
each id is staged as the live worker stages it (``store._set``), and each partition's staged
writes are applied with ``commit_partition`` every ``--batch`` ids (the ids, the derived age-out
index and summary in one write batch). Ids are 36-character UUIDv4-shaped strings (distinct by
construction), spread over partitions by the worker's own murmur2 partitioner
(``app.rules.partition_for``), first sightings spread over 27 days (inside the 28-day window).
Then, in the same process, it compacts every partition, measures disk bytes per id, and measures
lookups per partition and in total, with ``--lookups`` fresh ids per partition and method:

- ids not held (new ids, the common case: the bloom filter answers) and ids held (repeats);
- three ways: ``SeenIds.decide`` (the agent's decision: the table lookup, decode, and the
  staged write; staged writes are discarded every 1,000 ids so the store stays at N), the table
  lookup alone (``TransactionalTable.lookup`` -> ``store._get``: staged writes, then one RocksDB
  point read), and the baseline: raw rocksdict point gets on the same database.

Peak and current RSS of the process (``/proc/self/status`` VmHWM, VmRSS) are taken after the
load, after compaction and after the lookups, with RocksDB's own accounting (memtables, block
cache, table readers). Progress lines print every million ids; at 50M the load takes about a
quarter of an hour on 2 cores. The results are printed and written to bench/results-scale.md.
The data dir is a temporary directory under data/bench-scale, removed at the end unless
``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from bench.results_file import write_latest

RESULTS = Path(__file__).with_name("results-scale.md")
METHOD = (
    "`make bench-scale` (`python -m bench.scale`; its docstring and docs/benchmarks.md): ids "
    "loaded into a worker's partition databases through the store's own write path, compacted, "
    "then looked up in the same process; no broker."
)
TARGET = (
    "lookups through the worker's decision as close to raw rocksdict gets of the same keys in "
    "the same run as they can get, and disk and memory per id held low enough for 50M ids on "
    "one small machine; a change must not make them worse, measured back to back."
)
DATA_ROOT = Path(__file__).resolve().parents[1] / "data" / "bench-scale"
T0 = 1_790_000_000_000
#: First sightings of the ids held are spread over this span (inside the default 28-day window).
SPAN_MS = 27 * 86_400_000
MASK64 = (1 << 64) - 1
#: Staged writes are discarded (as after an aborted transaction) every this many decisions, so
#: the lookup phase leaves the store at exactly the ids loaded.
DISCARD_EVERY = 1_000


# -- pure helpers (tests/unit/test_bench_scale.py) ---------------------------------------------


def mix64(z: int) -> int:
    """SplitMix64's finaliser: a bijection on 64-bit integers that looks random."""
    z = (z + 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def uuid_like(i: int) -> bytes:
    """Id number ``i`` (0 <= i < 2**64) as a 36-byte UUIDv4-shaped messageId.

    All 64 bits of ``mix64(i)`` are in the string, so distinct ``i`` give distinct ids; another
    56 pseudo-random bits fill the rest; version nibble ``4`` and an RFC 4122 variant as in
    ``uuid.uuid4()``.
    """
    h = f"{mix64(i):016x}"
    lo = mix64(i ^ 0x5DEECE66D5DEECE6)
    low = f"{lo >> 8:014x}"
    return (f"{h[:8]}-{h[8:12]}-4{h[12:15]}-{'89ab'[lo & 3]}{low[:3]}-{h[15]}{low[3:]}").encode()


def first_seen_ms(i: int, ids: int) -> int:
    """Record time of the first sighting of id ``i`` of ``ids``: spread evenly over SPAN_MS."""
    return T0 + i * SPAN_MS // max(ids, 1)


def sample_by_partition(
    numbers: Iterator[int], partitions: int, per_partition: int, part: Callable[[bytes], int]
) -> list[list[bytes]]:
    """Ids ``uuid_like(n)`` for ``n`` from ``numbers``, ``per_partition`` for each partition."""
    out: list[list[bytes]] = [[] for _ in range(partitions)]
    missing = partitions
    for n in numbers:
        key = uuid_like(n)
        bucket = out[part(key)]
        if len(bucket) < per_partition:
            bucket.append(key)
            if len(bucket) == per_partition:
                missing -= 1
                if not missing:
                    break
    return out


def parse_vm_kib(status_text: str, name: str) -> int:
    """A ``Vm*`` figure of ``/proc/<pid>/status`` in bytes (``VmHWM:  1234 kB``); 0 if absent."""
    for line in status_text.splitlines():
        if line.startswith(f"{name}:"):
            return int(line.split()[1]) * 1024
    return 0


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def rate(n: int, seconds: float) -> float:
    return n / seconds if seconds > 0 else float("nan")


# -- measurement ---------------------------------------------------------------------------------


def memory() -> tuple[int, int]:
    """(VmHWM, VmRSS) of this process in bytes."""
    text = Path("/proc/self/status").read_text()
    return parse_vm_kib(text, "VmHWM"), parse_vm_kib(text, "VmRSS")


def read_bytes() -> int:
    """Bytes this process has read so far (``rchar`` of ``/proc/self/io``: from the page cache
    or the disk), so block reads RocksDB does outside its block cache show up."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("rchar:"):
            return int(line.split()[1])
    return 0


@dataclass
class Lookups:
    """Rates (ids/s) per partition for one kind of id (new or held) and one method."""

    per_partition: list[float] = field(default_factory=list)
    total: float = 0.0
    #: Bytes the process read (``rchar``: page cache or disk) during the measurement.
    read: int = 0


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


def rocksdb_memory(store: object, partitions: int) -> dict[str, int]:
    """RocksDB's own accounting, summed over partitions and column families."""
    totals = {"memtables": 0, "table readers (outside cache)": 0}
    cache_usage = cache_pinned = 0
    for p in range(partitions):
        pdb = store.partition_db(p)  # type: ignore[attr-defined]
        for db in (pdb.db, pdb.meta, *pdb.extra.values()):
            totals["memtables"] += db.property_int_value("rocksdb.cur-size-all-mem-tables") or 0
            totals["table readers (outside cache)"] += (
                db.property_int_value("rocksdb.estimate-table-readers-mem") or 0
            )
        cache_usage = pdb.db.property_int_value("rocksdb.block-cache-usage") or 0
        cache_pinned = pdb.db.property_int_value("rocksdb.block-cache-pinned-usage") or 0
    totals["block cache (shared)"] = cache_usage
    totals["block cache pinned"] = cache_pinned
    return totals


def run(
    ids: int,
    partitions: int,
    lookups: int,
    batch: int,
    keep: bool,
    environ: dict[str, str] | None = None,
) -> list[tuple[str, str]]:
    """Load, compact, look up; ``environ`` overrides settings (``DEDUPE_ROCKSDB_*``)."""
    import faust

    from app.rules import partition_for
    from app.settings import Settings
    from bench.measure import disk_bytes
    from tables import rocks_options as store_module
    from tables import seen_ids_table as seen_table
    from tables.seen_ids import SeenIds
    from tables.seen_ids_index import SeenIdsStore
    from tables.window import Entry, Verdict

    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
    print(f"data dir {directory}", flush=True)
    settings = Settings.from_env(environ or {})
    tuning = seen_table.rocks_tuning(settings)
    current = [0]
    rows: list[tuple[str, str]] = []
    try:
        app = faust.App("bench-scale", store="rocksdb://", datadir=str(directory))
        store = SeenIdsStore(
            "rocksdb://",
            app,
            types.SimpleNamespace(name="seen_ids"),
            partition_of=lambda: current[0],
            bucket_ms=round(settings.bucket * 1000),
            tuning=tuning,
            table_name="seen_ids",
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        _hwm, rss_start = memory()

        # -- load: stage each id in its partition, commit a partition every `batch` ids --------
        print(f"loading {ids:,} ids into {partitions} partitions", flush=True)
        read_start = read_bytes()
        started = time.perf_counter()
        seqs = [0] * partitions
        offsets = [0] * partitions
        for i in range(ids):
            key = uuid_like(i)
            p = partition_for(key, partitions)
            current[0] = p
            store._set(key, Entry(first_seen_ms(i, ids), seqs[p]).encode())
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

        # -- compaction and disk ------------------------------------------------------------
        started = time.perf_counter()
        for p in range(partitions):
            pdb = store.partition_db(p)
            pdb.db.compact_range(None, None)
            for cf in pdb.extra.values():
                cf.compact_range(None, None)
        compact_s = time.perf_counter() - started
        sst = sum(
            f.stat().st_size
            for p in range(partitions)
            for f in store.partition_path(p).rglob("*.sst")
        )
        allocated = sum(disk_bytes(store.partition_path(p)) for p in range(partitions))
        id_sst = 0
        for p in range(partitions):
            id_sst += (
                store.partition_db(p).db.property_int_value("rocksdb.total-sst-files-size") or 0
            )
        hwm_compact, rss_compact = memory()
        print(f"compacted in {compact_s:,.0f}s; sampling lookup ids", flush=True)

        # -- lookups ------------------------------------------------------------------------
        part = lambda key: partition_for(key, partitions)  # noqa: E731
        methods = ("decide", "table lookup", "raw rocksdict get")
        rng = random.Random(7)
        fresh = iter(range(ids, 2**63))

        def sample(kind: str) -> list[list[bytes]]:
            """The ids of one pass, built just before it (so the harness's own lists, ~60 MiB
            per pass at 100,000 per partition, do not add up in the RSS figures)."""
            numbers = fresh if kind == "new" else iter(lambda: rng.randrange(ids), -1)
            return sample_by_partition(numbers, partitions, lookups, part)

        # Warm-up: index and filter blocks into the cache, as in a worker that has been running.
        warm = sample_by_partition(iter(lambda: rng.randrange(ids), -1), partitions, 5_000, part)
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
            for method in methods:
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
        hwm_end, rss_end = memory()
        mem_end = rocksdb_memory(store, partitions)
        asyncio.run(store.on_stop())

        # -- the figures --------------------------------------------------------------------
        rows += [
            ("ids held", f"{ids:,} ({partitions} partitions, {min(held):,}..{max(held):,} each)"),
            ("load through the store (ids/s)", f"{rate(ids, load_s):,.0f} ({load_s:,.0f} s)"),
            ("  bytes read per id loaded (rchar)", f"{load_read / ids:,.0f}"),
            ("compaction (s)", f"{compact_s:,.0f}"),
            ("disk bytes per id (after compaction, SST)", f"{sst / ids:.1f}"),
            ("  of which the ids (default column family)", f"{id_sst / ids:.1f}"),
            ("  allocated on disk, whole dirs (per id)", f"{allocated / ids:.1f}"),
        ]
        for kind in ("new", "held"):
            raw = results[kind, "raw rocksdict get"].total
            for method in methods:
                r = results[kind, method]
                spread = f"{min(r.per_partition):,.0f}..{max(r.per_partition):,.0f}"
                ratio = "" if method == "raw rocksdict get" else f", {r.total / raw:.2f}x raw gets"
                rows.append(
                    (
                        f"lookup {kind} ids, {method} (ids/s)",
                        f"{r.total:,.0f} (per partition {spread}{ratio}; "
                        f"{r.read / (lookups * partitions):,.0f} bytes read per id)",
                    )
                )
        rows += [
            ("RSS at start", mib(rss_start)),
            ("RSS after load / peak so far (VmRSS / VmHWM)", f"{mib(rss_load)} / {mib(hwm_load)}"),
            (
                "RSS after compaction / peak so far",
                f"{mib(rss_compact)} / {mib(hwm_compact)}",
            ),
            ("RSS after lookups / peak (VmHWM)", f"{mib(rss_end)} / {mib(hwm_end)}"),
        ]
        for name, value in mem_load.items():
            rows.append((f"RocksDB after load: {name}", mib(value)))
        for name, value in mem_end.items():
            rows.append((f"RocksDB after lookups: {name}", mib(value)))
        rows += [
            (
                "RocksDB options (tables/rocks_options.py)",
                f"{tuning.compression}, {tuning.block_bytes // 1024} KiB data blocks, "
                f"block cache {mib(tuning.block_cache_bytes)} shared, memtables "
                f"{mib(tuning.memtable_budget_bytes)} for all partitions (write-buffer manager), "
                f"at most {mib(tuning.write_buffer_bytes)} each, bloom "
                f"{store_module.BLOOM_BITS_PER_KEY} bits/key partitioned with a two-level index "
                f"({store_module.METADATA_BLOCK_BYTES} B partitions), memtable bloom filter "
                f"{store_module.MEMTABLE_BLOOM_RATIO:.0%} of the ids' write buffer",
            ),
            ("lookups measured per partition and method", f"{lookups:,}"),
        ]
        return rows
    finally:
        if keep:
            print(f"kept {directory}", flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def machine() -> str:
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        total = parse_vm_kib(
            Path("/proc/meminfo").read_text().replace("MemTotal:", "VmTotal:"), "VmTotal"
        )
    except OSError:
        total = 0
    versions = ", ".join(
        f"{name} {metadata.version(name)}" for name in ("rocksdict", "faust-streaming", "aiokafka")
    )
    return (
        f"{platform.machine()}, {os.cpu_count()} cores ({cpu}), {total / 2**30:.0f} GiB RAM; "
        f"Python {platform.python_version()}, {versions}"
    )


def main(argv: list[str] | None = None) -> None:
    from app.settings import Settings

    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--ids", type=int, default=50_000_000, help="ids held (50,000,000)")
    parser.add_argument(
        "--partitions",
        type=int,
        default=Settings.from_env({}).partitions,
        help="partitions of the worker, one RocksDB each (DEDUPE_PARTITIONS default: 8)",
    )
    parser.add_argument(
        "--lookups", type=int, default=100_000, help="ids per partition, kind and method"
    )
    parser.add_argument("--batch", type=int, default=10_000, help="ids per partition commit")
    parser.add_argument(
        "--write-buffer-bytes",
        type=int,
        default=None,
        help="DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES for this run (default: the setting's default)",
    )
    parser.add_argument(
        "--memtable-budget-bytes",
        type=int,
        default=None,
        help="DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES for this run (default: the setting's default)",
    )
    parser.add_argument(
        "--block-cache-bytes",
        type=int,
        default=None,
        help="DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES for this run (default: the setting's default)",
    )
    parser.add_argument(
        "--block-bytes",
        type=int,
        default=None,
        help="DEDUPE_ROCKSDB_BLOCK_BYTES for this run (default: the setting's default)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--no-results", action="store_true", help="do not append to the results")
    args = parser.parse_args(argv)
    flags = {
        "DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES": args.write_buffer_bytes,
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES": args.memtable_budget_bytes,
        "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES": args.block_cache_bytes,
        "DEDUPE_ROCKSDB_BLOCK_BYTES": args.block_bytes,
    }
    environ = {name: str(value) for name, value in flags.items() if value is not None}
    rows = run(args.ids, args.partitions, args.lookups, args.batch, args.keep, environ)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if args.no_results:
        return
    command = " ".join(["python -m bench.scale", *sys.argv[1:]]) if argv is None else "run()"
    run_text = (
        f"## {time.strftime('%Y-%m-%d %H:%M')} `{command}`\n\n{machine()}\n\n"
        "| figure | value |\n|---|---|\n" + "".join(f"| {k.strip()} | {v} |\n" for k, v in rows)
    )
    write_latest(
        RESULTS, "Scale benchmark: ids held, lookups, memory, disk", METHOD, TARGET, run_text
    )


if __name__ == "__main__":
    main()
