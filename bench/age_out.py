"""Age-out benchmark: eviction rate per partition and disk bytes per id with N ids held.

    python -m bench.age_out                 # 10,000,000 ids held (a few minutes)
    python -m bench.age_out --ids 1000000   # quicker

It loads N ids (random-looking UUIDs, so that in key order ids of every age are mixed, as real
ones are) into one partition's store through the store's own write path (ids, the derived
counts and summary, in write batches), compacts, and measures bytes on disk per id. Then
it measures age-out through the worker's own code (``SeenIds.decide`` + ``age_out`` +
commits): (0) repeats of held ids, ``DEDUPE_WINDOW_FROM=first_seen`` (the repeat counted in
place) against ``last_seen`` (the id re-armed: its count moved to its new rank), alternating in
rounds so both see the same store; (1) at the size cap, each new id evicts the oldest (the cap
cuts 1% at a time, the sweep deletes what it cut); (2) a whole time window expiring.
The baseline, run in the same process on the same machine, is the limit: raw rocksdict deletes
of the same number of keys in write batches. You should see a table like::

    ids held                     10,000,000
    disk bytes per id            24.0
    evict at cap (ids/s)         30,000     0.02x raw deletes
    expire window (ids/s)        90,000     0.07x raw deletes

and the same figures written to bench/results-age-out.md.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import random
import shutil
import tempfile
import time
import types
from pathlib import Path

import faust
from rocksdict import Options, Rdict, WriteBatch

from app.settings import Settings
from bench.results_file import write_latest
from bench.scale_ids import uuid_like
from tables.seen_ids import SeenIds
from tables.seen_ids.store import SeenIdsStore
from tables.window import Entry, block_size, block_start

RESULTS = Path(__file__).with_name("results-age-out.md")
METHOD = (
    "`python -m bench.age_out` (its docstring and docs/age-out.md): random-looking UUIDs "
    "loaded into one partition's store, then aged out through the worker's own code, at the "
    "size cap and as a whole window expiring."
)
TARGET = (
    "eviction as close to raw rocksdict deletes of the same number of keys in the same run as "
    "it can get, and faster than one partition takes new ids; a change must not make it slower, "
    "measured back to back."
)
T0 = 1_790_000_000_000


class _Table:
    """The table surface SeenIds uses, straight on the store (no Kafka in this benchmark)."""

    def __init__(self, store: SeenIdsStore) -> None:
        self.data = store

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        return self.data.get_raw(key)

    def put(self, key: bytes, value: bytes, partition: int | None = None) -> None:
        self.data.set_raw(key, value)

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.data.set_raw(key, value)

    def __delitem__(self, key: bytes) -> None:
        self.data.del_raw(key)


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*.sst"))


def raw_delete_rate(directory: Path, n: int) -> float:
    """The limit: rocksdict puts then deletes ``n`` 36-byte keys in batches of 1,000."""
    opts = Options(raw_mode=True)
    opts.create_if_missing(True)
    db = Rdict(str(directory / "raw.db"), opts)
    keys = [f"{i:036d}".encode() for i in range(n)]
    for start in range(0, n, 10_000):
        wb = WriteBatch(raw_mode=True)
        for k in keys[start : start + 10_000]:
            wb.put(k, b"x" * 16)
        db.write(wb)
    started = time.perf_counter()
    for start in range(0, n, 1_000):
        wb = WriteBatch(raw_mode=True)
        for k in keys[start : start + 1_000]:
            wb.delete(k)
        db.write(wb)
    rate = n / (time.perf_counter() - started)
    db.close()
    return rate


def _uuid_like(i: int) -> bytes:
    """Id number ``i`` as a random-looking UUID: in key order the ids of any age are mixed, as
    real ones are, so the sweep (which reads the ids in key order) meets the ids it deletes
    among those it keeps."""
    return uuid_like(i)


def seen_ids(store: SeenIdsStore, settings: Settings) -> SeenIds:
    """``SeenIds`` under ``settings`` over ``store``, as a worker restarted with them has it: the
    store counts its ids again when the cap's block size changed (before any timing starts)."""
    block = block_size(settings.max_ids_per_partition)
    if store.block != block:
        store.block = block
        store.close_partition(0)
        store.counts(0)
    return SeenIds(_Table(store), settings)  # type: ignore[arg-type]


def repeat_rates(store: SeenIdsStore, ids: int, churn: int) -> dict[bool, float]:
    """Records/s of repeats of held ids through ``decide`` + ``age_out`` + commits, per
    ``last_seen``: ``churn`` each, on disjoint random held ids, in alternating rounds."""
    settings = Settings.from_env({"DEDUPE_MAX_IDS_PER_PARTITION": str(ids * 2)})
    seen = seen_ids(store, settings)
    picked = random.Random(1).sample(range(ids), min(2 * churn, ids))
    chosen = {False: picked[0::2], True: picked[1::2]}
    spent = {False: 0.0, True: 0.0}
    record = T0 + ids  # inside the window of every held id: each copy is a repeat
    rounds, done = 10, 0
    per_round = len(chosen[False]) // rounds
    for r in range(rounds):
        for last_seen in (False, True) if r % 2 == 0 else (True, False):
            started = time.perf_counter()
            for n, i in enumerate(chosen[last_seen][r * per_round : (r + 1) * per_round]):
                seen.decide(_uuid_like(i), record + n, 0, b"", last_seen)
                seen.age_out(record + n, 0)
                if n % 1_000 == 999:
                    store.commit_partition(0, None)
                    seen.commit_partition(0, None)
            store.commit_partition(0, None)
            seen.commit_partition(0, None)
            spent[last_seen] += time.perf_counter() - started
        done += per_round
    assert seen.held(0) == ids, "a repeat must neither add nor remove an id"
    return {k: done / v for k, v in spent.items()}


def run(ids: int, churn: int) -> list[tuple[str, str]]:
    directory = Path(tempfile.mkdtemp(prefix="bench-age-out-"))
    try:
        app = faust.App("bench-age-out", store="rocksdb://", datadir=str(directory))
        store = SeenIdsStore(
            "rocksdb://",
            app,
            types.SimpleNamespace(name="seen_ids"),
            partition_of=lambda: 0,
            bucket_ms=3_600_000,
            # Written as by a worker under the cap phase's cap (ids), which needs no recount.
            block=block_size(ids),
            table_name="seen_ids",
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        # -- load N ids (one per ms of record time, UUID-sized keys)
        started = time.perf_counter()
        batch = 10_000
        for start in range(0, ids, batch):
            writes: list[tuple[bytes, bytes | None]] = [
                (_uuid_like(i), Entry(T0 + i, block_start(i, store.block)).encode())
                for i in range(start, min(start + batch, ids))
            ]
            store.write_partition(0, writes, start)
            if start and start % 1_000_000 == 0:
                print(f"  loaded {start:,} ids", flush=True)
        load_rate = ids / (time.perf_counter() - started)
        pdb = store.partition_db(0)
        for family in (pdb.db, pdb.meta):
            family.compact_range(None, None)
        del pdb, family  # the database is opened again when a phase changes the cap
        bytes_per_id = disk_bytes(store.partition_path(0)) / ids
        # -- repeats of held ids: first_seen vs last_seen (re-armed, its count moved)
        repeats = repeat_rates(store, ids, churn)
        # -- at the cap: every new id evicts the oldest
        settings = Settings.from_env(
            {"DEDUPE_MAX_IDS_PER_PARTITION": str(ids), "DEDUPE_EVICTION_BATCH": "64"}
        )
        seen = seen_ids(store, settings)
        started = time.perf_counter()
        for i in range(churn):
            record = T0 + ids + i
            seen.decide(f"new-{i:030d}".encode(), record, 0)
            seen.age_out(record, 0)
            if i % 1_000 == 999:
                store.commit_partition(0, None)
                seen.commit_partition(0, None)
        store.commit_partition(0, None)
        seen.commit_partition(0, None)
        cap_rate = seen.evicted.get(0, 0) / (time.perf_counter() - started)
        held_after_cap = seen.held(0)
        # -- a window expires: stream time jumps past W for the oldest `churn` ids
        window = Settings.from_env({}).window
        settings = Settings.from_env(
            {
                "DEDUPE_MAX_IDS_PER_PARTITION": str(ids * 2),
                "DEDUPE_EVICTION_BATCH": "1000",
                "DEDUPE_ALLOWED_LATENESS": "0",
            }
        )
        seen = seen_ids(store, settings)
        jump = T0 + ids + round(window * 1000) + 3_600_000 * 2
        seen.decide(b"jump", jump, 0)
        started = time.perf_counter()
        expired = 0
        while expired < churn:
            gone = seen.age_out(jump, 0)
            store.commit_partition(0, None)
            seen.commit_partition(0, None)
            if not gone:
                break
            expired += gone
        expire_rate = expired / (time.perf_counter() - started)
        asyncio.run(store.on_stop())
        baseline = raw_delete_rate(directory, churn)
        return [
            ("ids held", f"{ids:,}"),
            ("load through the store (ids/s)", f"{load_rate:,.0f}"),
            ("disk bytes per id (after compaction)", f"{bytes_per_id:.1f}"),
            ("repeats, first_seen (records/s)", f"{repeats[False]:,.0f}"),
            (
                "repeats, last_seen (records/s)",
                f"{repeats[True]:,.0f}  ({repeats[True] / repeats[False]:.2f}x first_seen)",
            ),
            ("evict at cap (ids/s)", f"{cap_rate:,.0f}  ({cap_rate / baseline:.2f}x raw deletes)"),
            ("ids held after cap churn", f"{held_after_cap:,}"),
            ("expire window (ids/s)", f"{expire_rate:,.0f}  ({expire_rate / baseline:.2f}x raw)"),
            ("raw rocksdict deletes (ids/s)", f"{baseline:,.0f}"),
        ]
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ids", type=int, default=10_000_000)
    parser.add_argument("--churn", type=int, default=200_000)
    args = parser.parse_args()
    rows = run(args.ids, args.churn)
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    run_text = (
        f"## {time.strftime('%Y-%m-%d %H:%M')} `python -m bench.age_out --ids {args.ids}"
        f" --churn {args.churn}` ({platform.machine()}, {os.cpu_count()} cores, Python "
        f"{platform.python_version()})\n\n"
        "| figure | value |\n|---|---|\n" + "".join(f"| {k} | {v} |\n" for k, v in rows)
    )
    write_latest(RESULTS, "Age-out benchmark", METHOD, TARGET, run_text)


if __name__ == "__main__":
    main()
