"""Benchmark contender (g): the same de-duplication on Kafka Streams, exactly_once_v2, RocksDB.

    python -m bench.contenders.kstreams_dedup --bootstrap B --input T --output T2 \\
        --partitions P --state-dir D --group G

Builds the Java application in ``bench/contenders/kstreams/`` with Maven (from Maven Central,
once: again only when its sources change; the jars land in ``~/.m2``) and replaces this process
with it (``exec java``), so the benchmark measures the JVM alone. What the application does
(``KStreamsDedup.java``): the event-deduplication processor of Confluent's Kafka Streams
examples and tutorial on a persistent window store (RocksDB) of id -> first-seen time, the
window 28 days (the worker's default), ``processing.guarantee=exactly_once_v2``,
``commit.interval.ms=100`` (the worker's commit interval, and Kafka Streams' default under
exactly-once), the store's record cache on at Kafka Streams' default size (10 MiB, as the DSL's
stores have it; ``BENCH_KSTREAMS_CACHE=0`` turns it off), one stream thread (Kafka Streams'
default; ``BENCH_KSTREAMS_THREADS`` to change). ``--store kv`` runs the other pattern of the
tutorials: a persistent key-value store of id -> first-seen time and a wall-clock punctuator
(every ``BENCH_KSTREAMS_PUNCTUATE_MS``, default 60 s) that scans it and deletes the ids first seen
a window before stream time; each scan logs its duration and counts. The record key is the id;
values and headers pass through as bytes. SIGTERM closes it cleanly (the last transaction
commits) with status 0.

What it is, compared with the dedupe worker: exactly-once is Kafka Streams' own (one producer
per stream thread under v2, transactions every commit interval); the window store drops a
segment at a time once it is older than the window, no size cap; ``--partitions`` is unused
(the harness creates the topics; Kafka Streams creates its changelog with the input's count).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

PROJECT = Path(__file__).with_name("kstreams")
JAR = PROJECT / "target" / "kstreams-dedup-1.jar"
CLASSPATH = PROJECT / "target" / "classpath.txt"
MAIN = "dedupe.bench.KStreamsDedup"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="input topic (key = messageId)")
    parser.add_argument("--output", required=True, help="output topic (first copies)")
    parser.add_argument("--partitions", type=int, required=True, help="unused (see docstring)")
    parser.add_argument("--state-dir", required=True, help="Kafka Streams' state.dir")
    parser.add_argument("--group", required=True, help="application.id (group, txn ids)")
    parser.add_argument(
        "--store",
        choices=("window", "kv"),
        default="window",
        help="window: the tutorial's window store (contender g); kv: a key-value store and an "
        "expiry punctuator (contender h, bench/contenders/kstreams_kv_dedup.py)",
    )
    return parser.parse_args(argv)


def sources() -> list[Path]:
    return [PROJECT / "pom.xml", *sorted((PROJECT / "src").rglob("*.java"))]


def built() -> bool:
    """The jar and its classpath exist and are newer than every source."""
    if not (JAR.is_file() and CLASSPATH.is_file()):
        return False
    oldest = min(JAR.stat().st_mtime, CLASSPATH.stat().st_mtime)
    return all(src.stat().st_mtime <= oldest for src in sources())


def build() -> None:
    """``mvn package`` and the runtime classpath; Maven's output goes to stderr on failure."""
    mvn = shutil.which("mvn")
    if mvn is None:
        sys.exit("kstreams_dedup: Maven (mvn) is not installed: apt-get install maven")
    cmd = [mvn, "-q", "-B", "package", "dependency:build-classpath", "-DskipTests"]
    cmd.append(f"-Dmdep.outputFile={CLASSPATH}")
    done = subprocess.run(cmd, cwd=PROJECT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout + done.stderr)
        sys.exit(f"kstreams_dedup: the Maven build failed (exit {done.returncode})")


def java_command(args: argparse.Namespace) -> list[str]:
    classpath = f"{JAR}{os.pathsep}{CLASSPATH.read_text().strip()}"
    bootstrap, state = args.bootstrap, str(Path(args.state_dir).resolve())
    return ["java", "-cp", classpath, MAIN, bootstrap, args.input, args.output, state, args.group]


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if not built():
        build()
    Path(args.state_dir).mkdir(parents=True, exist_ok=True)
    cmd = java_command(args)
    print(f"kstreams-dedup: {args.input} -> {args.output}, application {args.group}", flush=True)
    # Set here, not inherited: the store is this command's choice, whatever the caller's env.
    os.environ["BENCH_KSTREAMS_STORE"] = args.store
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
