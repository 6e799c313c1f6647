"""Fetched record decoding: the native decoder (``adapters/fetched_records.py``) against
aiokafka's own loop, on the same fetched bytes, in the same run.

    python -m bench.decode                       # 400,000 records per codec, results-decode.md
    python -m bench.decode --records 100000      # a quicker run

The records are the contender benchmark's events (``bench.contender_data``: a JSON event keyed
by its messageId, one header), written by aiokafka's producer batch builder into 1 MiB fetches of
16 KiB batches, as a fetch of the worker's input topic brings them. Each side drains every fetch
the way the consumer does (``FetchResult.getall``: every record, the fetch position moved) and
is timed by the process's CPU clock, best of five; the figure is nanoseconds of CPU per record
and the ratio native / aiokafka. It prints one line per codec and rewrites
bench/results-decode.md.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import time
from collections.abc import Iterator
from pathlib import Path

from aiokafka.consumer.fetcher import PartitionRecords
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.structs import TopicPartition

from adapters import fetched_records
from adapters.fetched_records import KeptRecords, NativePartitionRecords
from bench.contender_data import generate
from bench.results_file import write_latest

RESULTS = Path(__file__).with_name("results-decode.md")
METHOD = (
    "`python -m bench.decode` (its docstring): the contender benchmark's events in 1 MiB "
    "fetches of 16 KiB batches written by aiokafka's batch builder, drained as the consumer "
    "drains a fetch, by aiokafka's loop and by the native decoder over the same bytes; CPU per "
    "record, best of five."
)
TARGET = (
    "the native decoder well below aiokafka's loop in every codec (it replaces the ~20% of the "
    "worker's samples that aiokafka's record unpacking took); never slower."
)
CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
TOPIC = "events"
FETCH_BYTES = 1 << 20
BATCH_BYTES = 16 << 10


def fetches(records: int, codec: int) -> Iterator[bytes]:
    """The events as fetches: batches of at most ``BATCH_BYTES`` at consecutive offsets."""
    offset, fetch = 0, b""
    events = generate(records, 0.2)
    while True:
        builder = DefaultRecordBatchBuilder(2, codec, 0, -1, -1, -1, BATCH_BYTES)
        base, n = offset, 0
        for record in events:
            ts = 1_790_000_000_000 + offset
            if builder.append(n, ts, record.key, record.value, list(record.headers)) is None:
                events = itertools.chain([record], events)
                break
            n += 1
            offset += 1
        if n == 0:
            break
        batch = bytearray(builder.build())
        batch[0:8] = base.to_bytes(8, "big", signed=True)
        if len(fetch) + len(batch) > FETCH_BYTES:
            yield fetch
            fetch = b""
        fetch += bytes(batch)
    if fetch:
        yield fetch


def drain(cls: type[PartitionRecords], data: list[bytes]) -> int:
    """Every record of every fetch, as ``FetchResult.getall`` takes them; the record count."""
    tp = TopicPartition(TOPIC, 0)
    count, offset = 0, 0
    for fetch in data:
        records = cls(tp, KeptRecords(fetch), None, offset, None, None, True, 0)
        taken = list(records)
        count += len(taken)
        offset = records.next_fetch_offset
    return count


def best_ns(cls: type[PartitionRecords], data: list[bytes], rounds: int = 5) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(rounds):
        start = time.process_time()
        count = drain(cls, data)
        best = min(best, time.process_time() - start)
    return best * 1e9 / count, count


def run(records: int) -> list[tuple[str, str]]:
    native = fetched_records.load()
    if native is None:
        raise SystemExit("bench.decode: dedupe_native is not installed (make install builds it)")
    fetched_records.install(native, [TOPIC])
    rows = []
    try:
        for name, codec in CODECS.items():
            data = list(fetches(records, codec))
            theirs, n = best_ns(PartitionRecords, data)
            ours, m = best_ns(NativePartitionRecords, data)
            assert n == m == records, (n, m, records)
            size = sum(map(len, data)) / records
            rows.append(
                (
                    name,
                    f"{size:,.0f} | {theirs:,.0f} | {ours:,.0f} | {ours / theirs:.2f}x",
                )
            )
            print(
                f"{name:<7} {size:5.0f} B/record  aiokafka {theirs:6.0f} ns  native "
                f"{ours:6.0f} ns  ({ours / theirs:.2f}x)",
                flush=True,
            )
    finally:
        fetched_records.uninstall()
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=400_000)
    args = parser.parse_args()
    rows = run(args.records)
    run_text = (
        f"## {time.strftime('%Y-%m-%d %H:%M')} `python -m bench.decode --records {args.records}`"
        f" ({platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()})\n\n"
        "| codec | fetched B / record | aiokafka's loop, ns CPU / record | native, ns CPU / "
        "record | native / aiokafka |\n|---|---|---|---|---|\n"
        + "".join(f"| {k} | {v} |\n" for k, v in rows)
    )
    write_latest(RESULTS, "Fetched record decoding", METHOD, TARGET, run_text)


if __name__ == "__main__":
    main()
