"""Lake benchmark: rows/s into the Delta events table, append vs merge; files before/after optimize.

    make bench-lake                                    # 200,000 events, 20,000 per micro-batch
    make bench-lake BENCH_LAKE_ARGS="--events 50000"   # quicker
    python -m bench.lake --events 200000 --batch 20000 # with KAFKA_BOOTSTRAP_SERVERS set

It needs a broker (``make bench-lake`` starts one on ``BENCH_KAFKA_PORT``, 29092, unless
``KAFKA_BOOTSTRAP_SERVERS`` is set). It produces ``--events`` distinct Segment-style events
(``scripts.streams``, keyed by messageId, 4 partitions) to a fresh topic standing in for the
worker's clean topic, then, in one local[2] Spark session, runs the job's own events query
(:func:`spark.job.start_events_query`) over the whole topic with ``maxOffsetsPerTrigger =
--batch`` and an available-now trigger, once per write mode into its own lake:

- ``append``: Delta's streaming sink (``DEDUPE_LAKE_WRITE=append``, the default);
- ``merge``: ``MERGE ... ON messageId WHEN NOT MATCHED THEN INSERT *`` per batch
  (``DEDUPE_LAKE_WRITE=merge``), whose join reads the table's whole messageId column, so a
  batch costs more as the table grows: the first and last batches' times show the trend.

``--rounds`` (2) alternates the order (append then merge, then merge then append), each run into
a fresh lake, so neither mode always pays the session's warm-up; the summary is the mean.

Rows/s is the rows in the table over the query's wall time (first batch planned to the last
committed; the JVM is already up). Then the append table is compacted (:func:`spark.upkeep.
optimize_table`, Z-ordered by userId with ``--zorder``): files in the table before and after,
and the time delta-rs (no Spark) takes to read the whole table before and after. You see a line
per phase, then the table, which is also written to bench/results-lake.md. The lakes live in
a temporary directory under data/bench-lake, removed at the end unless ``--keep``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path

from deltalake import DeltaTable
from pyspark.sql import SparkSession

from scripts.streams import build_stream, produce
from scripts.topic_admin import create_topics
from spark.job import Trigger, start_events_query
from spark.session import build_session
from spark.settings import APPEND, MERGE, SparkSettings
from spark.upkeep import optimize_table

RESULTS = Path(__file__).with_name("results-lake.md")
DATA_ROOT = Path(__file__).resolve().parents[1] / "data" / "bench-lake"
PARTITIONS = 4


@dataclass(frozen=True)
class WriteRun:
    """One write mode's run over the whole topic."""

    mode: str
    round: int
    rows: int
    seconds: float
    batch_ms: list[int]
    files: int

    @property
    def rows_per_second(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


@dataclass(frozen=True)
class Compaction:
    files_before: int
    files_after: int
    seconds: float
    read_before: float
    read_after: float
    zorder: str


#: Under every run's figures: what they do not show by themselves.
WHY = (
    "Round 1 pays the Spark session's warm-up (its first batch), so the warm comparison is the "
    "last round. The merge's inserts go through the join's shuffle partitions, while the append "
    "writes one file per Kafka partition and date: hence the files column. The merge also reads "
    "the table's ids on every batch, a cost that grows with the table, so expect the gap to "
    "widen on a table of many millions of rows."
)


def render(events: int, batch: int, runs: list[WriteRun], compaction: Compaction, head: str) -> str:
    """The results as Markdown (pure; tests/unit/bench/test_bench_lake.py)."""
    lines = [
        head,
        "",
        f"{events:,} distinct events, {batch:,} per micro-batch, local[2], 4 Kafka partitions.",
        "",
        "| round | write | rows | wall s | rows/s | batches | first batch ms | "
        "median ms | last batch ms | files |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for run in runs:
        ms = run.batch_ms or [0]
        lines.append(
            f"| {run.round} | {run.mode} | {run.rows:,} | {run.seconds:.1f} | "
            f"{run.rows_per_second:,.0f} | {len(run.batch_ms)} | {ms[0]:,} | "
            f"{statistics.median(ms):,.0f} | {ms[-1]:,} | {run.files} |"
        )
    means = {
        mode: statistics.mean(r.rows_per_second for r in runs if r.mode == mode)
        for mode in dict.fromkeys(r.mode for r in runs)
    }
    base = means.get(APPEND, 0.0)
    summary = ", ".join(
        f"{mode} {rate:,.0f} rows/s"
        + (f" ({rate / base:.2f}x append)" if base and mode != APPEND else "")
        for mode, rate in means.items()
    )
    last = max((r.round for r in runs), default=1)
    warm = {r.mode: r.rows_per_second for r in runs if r.round == last}
    if last > 1 and warm.get(APPEND):
        summary += f"; round {last}, warm: " + ", ".join(
            f"{mode} {rate / warm[APPEND]:.2f}x append"
            for mode, rate in warm.items()
            if mode != APPEND
        )
    c = compaction
    lines += [
        "",
        f"Mean over the rounds: {summary}.",
        "",
        WHY,
        "",
        f"Optimize of the append table{c.zorder}: {c.files_before} files -> {c.files_after} in "
        f"{c.seconds:.1f} s; delta-rs reads the whole table in {c.read_before:.2f} s before, "
        f"{c.read_after:.2f} s after.",
        "",
    ]
    return "\n".join(lines)


def write_run(spark: SparkSession, settings: SparkSettings, mode: str, round_no: int) -> WriteRun:
    """Run the events query in ``mode`` over the whole topic; returns its figures."""
    lake = Path(settings.lake_dir) / f"{mode}-{round_no}"
    settings = replace(settings, lake_dir=str(lake), lake_write=mode)
    started = time.monotonic()
    query = start_events_query(spark, settings, Trigger(available_now=True))
    query.awaitTermination()
    seconds = time.monotonic() - started
    if query.exception() is not None:
        raise RuntimeError(f"{mode}: {query.exception()}")
    batch_ms = [
        int(p.durationMs.get("triggerExecution", 0)) for p in query.recentProgress if p.numInputRows
    ]
    table = DeltaTable(settings.events_path)
    rows = table.to_pyarrow_table(columns=["messageId"]).num_rows
    return WriteRun(mode, round_no, rows, seconds, batch_ms, len(table.file_uris()))


def read_seconds(path: str) -> float:
    started = time.monotonic()
    DeltaTable(path).to_pyarrow_table()
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=20_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--rounds", type=int, default=2, help="alternating append/merge")
    parser.add_argument("--zorder", default="userId", help="optimize: Z-order by (empty: none)")
    parser.add_argument("--keep", action="store_true", help="keep the lakes under data/")
    args = parser.parse_args(argv)
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:29092")
    topic = f"bench-lake-{int(time.time())}"
    DATA_ROOT.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="run-", dir=DATA_ROOT))
    try:
        asyncio.run(create_topics(bootstrap, [topic], PARTITIONS))
        stream = build_stream(args.events, 0.0, seed=26)
        print(f"bench-lake: producing {args.events:,} events to {topic} ...", flush=True)
        asyncio.run(produce(bootstrap, topic, stream.records))
        settings = replace(
            SparkSettings.from_env({}),
            bootstrap_servers=bootstrap,
            topic=topic,
            lake_dir=str(root),
            max_offsets_per_trigger=args.batch,
            shuffle_partitions=2,
            driver_memory="2g",
        )
        spark = build_session(settings, "dedupe-bench-lake")
        try:
            runs = []
            for round_no in range(1, args.rounds + 1):
                order = (APPEND, MERGE) if round_no % 2 else (MERGE, APPEND)
                for mode in order:
                    print(f"bench-lake: round {round_no}: {mode} ...", flush=True)
                    runs.append(write_run(spark, settings, mode, round_no))
                    rate = runs[-1].rows_per_second
                    print(f"bench-lake: {mode}: {rate:,.0f} rows/s", flush=True)
            events_path = str(root / f"{APPEND}-{args.rounds}" / "events")
            read_before = read_seconds(events_path)
            zorder = [args.zorder] if args.zorder else []
            print("bench-lake: optimize ...", flush=True)
            result = optimize_table(spark, events_path, zorder)
            compaction = Compaction(
                result.files_before,
                result.files_after,
                result.seconds,
                read_before,
                read_seconds(events_path),
                f" (Z-order by {args.zorder})" if args.zorder else "",
            )
        finally:
            spark.stop()
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    head = (
        f"## {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC: `python -m bench.lake "
        f"--events {args.events} --batch {args.batch} --rounds {args.rounds}` on "
        f"{os.cpu_count()} cores, "
        f"{platform.python_implementation()} {platform.python_version()}, pyspark "
        f"{metadata.version('pyspark')}, delta-spark {metadata.version('delta-spark')}, "
        f"deltalake {metadata.version('deltalake')}"
    )
    text = render(args.events, args.batch, runs, compaction, head)
    print(text)
    RESULTS.write_text(
        "# Lake benchmark (make bench-lake)\n\nWritten by `python -m bench.lake`; the method is "
        "in its docstring.\n\nTarget: merge-on-id's rows/s next to the append's in the same run "
        "(round 2: round 1 pays the Spark session's warm-up); a change must not make either "
        "slower, measured back to back.\n\n" + text
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
