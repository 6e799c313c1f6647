"""Scale benchmark: lookups, memory and disk with 50M ids held across a worker's partitions.

    python -m bench.scale                              # 50,000,000 ids over 8 partitions
    python -m bench.scale --ids 5000000 --lookups 20000  # quicker
    python -m bench.scale --id-shape mix  # another id shape: bench/results-scale-mix.md
    make bench-scale BENCH_SCALE_ARGS="--ids 5000000"

No broker. It loads N ids already held into one worker's ``seen_ids`` store, one RocksDB per
partition (``--partitions``, default ``DEDUPE_PARTITIONS``), through the store's own write path:
each id is staged as the live worker stages it (``store.set_raw``), and each partition's staged
writes are applied with ``commit_partition`` every ``--batch`` ids (the ids, the derived counts
and summary in one write batch). Ids are 36-character UUIDv4-shaped strings (distinct by
construction; ``--id-shape`` picks another shape of ``bench.scale_ids.ID_SHAPES``: ``ajs-``
ids, upper-case UUIDs, hex, decimal, other ASCII, non-ASCII, or a mix of four), spread
over partitions by the worker's own murmur2 partitioner (``app.rules.partition_for``), first
sightings spread over 27 days (inside the 28-day window).
Then, in the same process, it compacts every partition, measures disk bytes per id, and measures
lookups per partition and in total, with ``--lookups`` fresh ids per partition and method:

- ids not held (new ids, the common case: the bloom filter answers) and ids held (repeats);
- three ways: ``SeenIds.decide`` (the agent's decision: the table lookup, decode, and the
  staged write; staged writes are discarded every 1,000 ids so the store stays at N), the table
  lookup alone (``TransactionalTable.lookup`` -> ``store.get_raw``: staged writes, then one RocksDB
  point read), and the baseline: raw rocksdict point gets on the same database.

Peak and current RSS of the process (``/proc/self/status`` VmHWM, VmRSS) are taken after the
load, after compaction and after the lookups, with RocksDB's own accounting (memtables, block
cache, table readers). Progress lines print every million ids; at 50M the load takes about a
quarter of an hour on 2 cores. The results are printed and written to bench/results-scale.md
(UUIDs) or bench/results-scale-<shape>.md (``--id-shape``).
The data dir is a temporary directory under data/bench-scale, removed at the end unless
``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING

from bench.results_file import write_latest
from bench.scale_ids import ID_SHAPES
from bench.scale_measure import machine, memory, mib, rate
from bench.scale_phases import METHODS, Compacted, Loaded, Lookups, compact, load, measure_lookups

if TYPE_CHECKING:
    from tables.rocks_options import RocksTuning

RESULTS = Path(__file__).with_name("results-scale.md")


def results_file(id_shape: str) -> tuple[Path, str]:
    """Where a run of ``id_shape`` is written, and its title: UUIDs (the figures the sizing plan
    cites) to :data:`RESULTS`, each other shape to its own file, so each file holds the latest
    run of one shape."""
    title = "Scale benchmark: ids held, lookups, memory, disk"
    if id_shape == "uuid":
        return RESULTS, title
    return RESULTS.with_name(f"results-scale-{id_shape}.md"), f"{title} ({id_shape} ids)"


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


def run(
    ids: int,
    partitions: int,
    lookups: int,
    batch: int,
    keep: bool,
    environ: dict[str, str] | None = None,
    id_shape: str = "uuid",
) -> list[tuple[str, str]]:
    """Load, compact, look up ids of ``id_shape`` (a name of ``ID_SHAPES``); ``environ``
    overrides settings (``DEDUPE_ROCKSDB_*``)."""
    import faust

    from app.settings import Settings
    from bench.scale_measure import rocksdb_memory
    from tables.seen_ids import table as seen_table
    from tables.seen_ids.store import SeenIdsStore
    from tables.window import block_size

    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    directory = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
    print(f"data dir {directory}", flush=True)
    id_of = ID_SHAPES[id_shape]
    settings = Settings.from_env(environ or {})
    tuning = seen_table.rocks_tuning(settings)
    current = [0]
    try:
        app = faust.App("bench-scale", store="rocksdb://", datadir=str(directory))
        store = SeenIdsStore(
            "rocksdb://",
            app,
            types.SimpleNamespace(name="seen_ids"),
            partition_of=lambda: current[0],
            bucket_ms=round(settings.bucket * 1000),
            block=block_size(settings.max_ids_per_partition),
            tuning=tuning,
            table_name="seen_ids",
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        _hwm, rss_start = memory()
        loaded = load(store, current, ids, partitions, batch, id_of)
        compacted = compact(store, partitions)
        results = measure_lookups(store, current, settings, ids, partitions, lookups, id_of)
        end = memory()
        mem_end = rocksdb_memory(store, partitions)
        asyncio.run(store.on_stop())
        rows = figures(
            ids, partitions, lookups, tuning, rss_start, loaded, compacted, results, end, mem_end
        )
        return [("id shape (--id-shape)", id_shape), *rows]
    finally:
        if keep:
            print(f"kept {directory}", flush=True)
        else:
            shutil.rmtree(directory, ignore_errors=True)


def figures(
    ids: int,
    partitions: int,
    lookups: int,
    tuning: RocksTuning,
    rss_start: int,
    loaded: Loaded,
    compacted: Compacted,
    results: dict[tuple[str, str], Lookups],
    end: tuple[int, int],
    mem_end: dict[str, int],
) -> list[tuple[str, str]]:
    """The result rows of one run, from what its phases measured."""
    from tables import rocks_options as store_module

    held = loaded.held
    hwm_end, rss_end = end
    rows: list[tuple[str, str]] = [
        ("ids held", f"{ids:,} ({partitions} partitions, {min(held):,}..{max(held):,} each)"),
        (
            "load through the store (ids/s)",
            f"{rate(ids, loaded.seconds):,.0f} ({loaded.seconds:,.0f} s)",
        ),
        ("  bytes read per id loaded (rchar)", f"{loaded.read / ids:,.0f}"),
        ("compaction (s)", f"{compacted.seconds:,.0f}"),
        ("disk bytes per id (after compaction, SST)", f"{compacted.sst / ids:.1f}"),
        ("  of which the ids (default column family)", f"{compacted.id_sst / ids:.1f}"),
        *(
            (f"  of which {name}", f"{size / ids:.1f}")
            for name, size in sorted(compacted.cf_sst.items())
        ),
        ("  allocated on disk, whole dirs (per id)", f"{compacted.allocated / ids:.1f}"),
    ]
    for kind in ("new", "held"):
        raw = results[kind, "raw rocksdict get"].total
        for method in METHODS:
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
        (
            "RSS after load / peak so far (VmRSS / VmHWM)",
            f"{mib(loaded.rss)} / {mib(loaded.hwm)}",
        ),
        (
            "RSS after compaction / peak so far",
            f"{mib(compacted.rss)} / {mib(compacted.hwm)}",
        ),
        ("RSS after lookups / peak (VmHWM)", f"{mib(rss_end)} / {mib(hwm_end)}"),
    ]
    for name, value in loaded.rocksdb.items():
        rows.append((f"RocksDB after load: {name}", mib(value)))
    for name, value in mem_end.items():
        rows.append((f"RocksDB after lookups: {name}", mib(value)))
    rows += [
        (
            "RocksDB options (tables/rocks_options.py)",
            f"{tuning.compression}, {tuning.block_bytes // 1024} KiB data blocks (a full key "
            f"every {store_module.BLOCK_RESTART_INTERVAL}), "
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
    parser.add_argument(
        "--id-shape",
        choices=sorted(ID_SHAPES),
        default="uuid",
        help="the ids' shape (bench/scale_ids.py; default uuid: canonical lowercase UUIDs)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--no-results", action="store_true", help="do not write the results file")
    args = parser.parse_args(argv)
    flags = {
        "DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES": args.write_buffer_bytes,
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES": args.memtable_budget_bytes,
        "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES": args.block_cache_bytes,
        "DEDUPE_ROCKSDB_BLOCK_BYTES": args.block_bytes,
    }
    environ = {name: str(value) for name, value in flags.items() if value is not None}
    rows = run(
        args.ids, args.partitions, args.lookups, args.batch, args.keep, environ, args.id_shape
    )
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
    path, title = results_file(args.id_shape)
    write_latest(
        path,
        title,
        METHOD,
        TARGET,
        run_text,
    )


if __name__ == "__main__":
    main()
