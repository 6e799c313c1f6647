"""The benchmark contenders on the real broker, through the CLI the harness launches them with.

Each runs as ``python -m bench.contenders.<name> --bootstrap B --input T --output T2
--partitions P --state-dir D --group G`` on a fresh input topic of Segment-style events with
repeats (keyed by messageId); the output topic, read with read_committed, must hold every
messageId once with the first copy's key, value and headers, and SIGTERM must stop the contender
with exit status 0. The Spark contender's test is in ``tests/spark/`` (spark tier) and uses the
helpers below.
"""

from __future__ import annotations

import asyncio
import importlib.util
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from aiokafka.structs import TopicPartition

from scripts.streams import Stream, build_stream, produce
from scripts.topic_admin import create_topics
from scripts.topic_reader import Record, committed_offsets, end_offsets, read_topic
from tests.support import ROOT, Broker, Names
from tests.workers import signal_and_wait

pytestmark = pytest.mark.integration

PARTITIONS = 4


def contender_stream(unique: int = 5_000, repeats: float = 0.1, seed: int = 11) -> Stream:
    """Events keyed by messageId with immediate and late repeats (no null-keyed copies: the
    benchmark's input contract is key = messageId)."""
    return build_stream(unique, repeats, seed=seed, late_distance=1_000, kinds=(0.5, 0.5, 0.0))


def prepare(broker: Broker, names: Names, stream: Stream) -> None:
    """Create the input and output topics and produce the stream into the input."""
    asyncio.run(
        create_topics(broker.bootstrap, [names.input_topic, names.output_topic], PARTITIONS)
    )
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))


def start_contender(name: str, broker: Broker, names: Names, log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                f"bench.contenders.{name}",
                "--bootstrap",
                broker.bootstrap,
                "--input",
                names.input_topic,
                "--output",
                names.output_topic,
                "--partitions",
                str(PARTITIONS),
                "--state-dir",
                str(names.data_root / f"{name}-state"),
                "--group",
                names.app_id,
            ],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def wait_output(
    broker: Broker,
    names: Names,
    want: int,
    proc: subprocess.Popen[bytes],
    log: Path,
    timeout: float,
) -> list[Record]:
    """Read the output (read_committed) until it holds ``want`` records; then once more after a
    pause, so records written past ``want`` (duplicates) are seen too."""
    deadline = time.monotonic() + timeout
    while True:
        records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
        if len(records) >= want:
            break
        if proc.poll() is not None:
            raise AssertionError(f"contender exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(records)} of {want} output records after {timeout}s:\n"
                f"{log.read_text()[-4000:]}"
            )
        time.sleep(0.5)
    time.sleep(2)
    return asyncio.run(read_topic(broker.bootstrap, names.output_topic))


def wait_committed(
    broker: Broker, names: Names, proc: subprocess.Popen[bytes], log: Path, timeout: float
) -> None:
    """Block until group ``names.app_id`` committed the input topic's end offsets."""
    deadline = time.monotonic() + timeout
    ends = asyncio.run(end_offsets(broker.bootstrap, names.input_topic))
    while True:
        committed = asyncio.run(committed_offsets(broker.bootstrap, names.app_id))
        if all(
            committed.get(TopicPartition(names.input_topic, p), 0) >= e for p, e in ends.items()
        ):
            return
        if proc.poll() is not None:
            raise AssertionError(f"contender exited {proc.returncode}:\n{log.read_text()[-4000:]}")
        if time.monotonic() > deadline:
            raise AssertionError(f"offsets {committed} short of {ends}:\n{log.read_text()[-4000:]}")
        time.sleep(0.5)


def assert_first_copies(records: list[Record], stream: Stream) -> None:
    """Every messageId once, with the key, value bytes and headers it was sent with."""
    keys = Counter(r.key for r in records)
    repeated = {k: n for k, n in keys.items() if n > 1}
    assert not repeated, f"{len(repeated)} ids written more than once"
    assert {k.decode() for k in keys if k is not None} == set(stream.unique)
    headers = stream.records[0].headers
    for r in records:
        assert r.key is not None
        assert r.value == stream.unique[r.key.decode()]
        assert r.headers == headers


def run_contender(name: str, broker: Broker, names: Names, timeout: float) -> None:
    """Produce, run the contender until it wrote every id, check the output, SIGTERM it."""
    stream = contender_stream()
    assert stream.duplicates > 0
    prepare(broker, names, stream)
    log = names.data_root / f"{name}.log"
    names.data_root.mkdir(parents=True, exist_ok=True)
    proc = start_contender(name, broker, names, log)
    try:
        records = wait_output(broker, names, len(stream.unique), proc, log, timeout)
        assert_first_copies(records, stream)
        assert signal_and_wait(proc, signal.SIGTERM, 60) == 0, log.read_text()[-4000:]
    finally:
        signal_and_wait(proc, signal.SIGKILL, 30)


def rerun_on_state(name: str, broker: Broker, names: Names, timeout: float) -> None:
    """Restarted on its state: a second pass of the same stream is dropped whole, once the
    group's committed offsets (committed in the contender's transactions) cover it."""
    stream = contender_stream()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    log = names.data_root / f"{name}.log"
    proc = start_contender(name, broker, names, log)
    try:
        wait_committed(broker, names, proc, log, timeout=timeout)
        records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
        assert_first_copies(records, stream)
        assert signal_and_wait(proc, signal.SIGTERM, 60) == 0, log.read_text()[-4000:]
    finally:
        signal_and_wait(proc, signal.SIGKILL, 30)


def test_quix_contender_forwards_each_id_once(broker: Broker, names: Names) -> None:
    if importlib.util.find_spec("quixstreams") is None:  # not imported here: it warns
        pytest.skip("quixstreams is not installed (the bench extra: pip install -e '.[bench]')")
    run_contender("quix_dedup", broker, names, timeout=120)
    rerun_on_state("quix_dedup", broker, names, timeout=60)


def test_kafka_streams_contender_forwards_each_id_once(broker: Broker, names: Names) -> None:
    if shutil.which("mvn") is None or shutil.which("java") is None:
        pytest.fail("the Kafka Streams contender needs java and mvn: apt-get install maven")
    run_contender("kstreams_dedup", broker, names, timeout=180)
    rerun_on_state("kstreams_dedup", broker, names, timeout=120)
