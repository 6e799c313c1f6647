"""F3 graceful restarts and stops (F3a, F3b), F13 a stale committed offset, F14 records the
consumer skipped: each during a flowing stream, each ending exactly once."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import time
import urllib.request

import pytest
from aiokafka import AIOKafkaConsumer
from aiokafka.structs import OffsetAndMetadata

from app.admin.topics import ensure_topics
from scripts.streams import build_stream, produce
from scripts.topic_reader import committed_offsets
from tables.seen_ids.table import changelog_topic_name
from tests.faults.conftest import SCALE, Reliability
from tests.faults.scenario import (
    Feeder,
    drain_and_verify,
    record,
    scaled_stream,
    settings_of,
    started,
)
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.faults


def test_f3_graceful_restarts_leave_no_open_transaction(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    worker = started(broker, names, workers)
    stream = scaled_stream(15_000, seed=3)
    rng = random.Random(3)
    # Each stop meets a flowing stream: a quarter of it fed steadily over 6 s, then the stop.
    for i in range(3):
        feeder = Feeder(broker, names, stream, seconds=6, part=(i, 4))
        time.sleep(rng.uniform(1.5, 3.5))
        feeder.assert_flowing()
        assert worker.kill(signal.SIGTERM) == 0  # a clean stop exits 0
        worker.start()
        feeder.join()
    Feeder(broker, names, stream, part=(3, 4)).join()
    report, waited = drain_and_verify(broker, names, workers)
    assert report.open_transactions == []
    record(reliability, "F3 graceful restart (SIGTERM)", len(stream.records), 3, report, waited)


def test_f3b_a_graceful_stop_during_a_rebalance_exits_cleanly(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """SIGTERM while a rebalance is half done (its new tasks' producers started, their start
    offsets not yet read): the stop closes every task under the rebalance, which must notice
    and end; the worker exits 0 (it used to crash with KeyError and exit 1), and the next start
    goes on exactly once. Found by F3, whose SIGTERMs land at random moments of start-up."""
    settings = settings_of(broker, names, partitions=4)
    asyncio.run(ensure_topics(settings, changelog_topic_name(settings)))
    stream = scaled_stream(4_000, seed=32)
    asyncio.run(
        produce(broker.bootstrap, names.input_topic, stream.records[: len(stream.records) // 2])
    )
    worker = Worker(broker, names, extra_env={"DEDUPE_FAULT_INJECTION": "assigned=term@1"})
    workers.append(worker)
    worker.start()
    assert worker.proc is not None
    code = worker.proc.wait(120)
    log = worker.log_text()
    assert "Signal received: 15" in log, log[-4000:]
    assert code == 0, log[-4000:]
    worker.extra_env = {}
    worker.start()  # no wait_ready: the stopped start never logged "Ready", so counts differ
    asyncio.run(
        produce(broker.bootstrap, names.input_topic, stream.records[len(stream.records) // 2 :])
    )
    report, waited = drain_and_verify(broker, names, workers)
    record(
        reliability,
        "F3b graceful stop in the middle of a rebalance",
        len(stream.records),
        1,
        report,
        waited,
    )


def forwarded(worker: Worker) -> int:
    """Records forwarded by ``worker`` so far (committed or not), from its /stats endpoint."""
    url = f"http://127.0.0.1:{worker.web_port}/stats"
    with urllib.request.urlopen(url, timeout=10) as response:
        partitions = json.load(response)["partitions"]
    return sum(int(p["forwarded"]) for p in partitions.values())


def test_f3a_a_graceful_stop_keeps_the_ids_of_its_last_transaction(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """SIGTERM while every processed record is still in an open transaction (a 60 s commit
    interval makes sure of it): the stop commits it, and after the restart the store must hold
    its ids, so a second copy of every event is dropped. (Faust closes the tables before its
    transaction manager stops; committing there used to record the changelog offset without
    the ids, and every id came out twice.)"""
    worker = started(broker, names, workers, extra_env={"DEDUPE_COMMIT_INTERVAL": "60s"})
    stream = build_stream(2_000 * SCALE, 0.0, seed=31)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    deadline = time.monotonic() + 120
    while forwarded(worker) < len(stream.unique):
        assert time.monotonic() < deadline, f"only {forwarded(worker)} forwarded"
        time.sleep(0.2)
    assert worker.kill(signal.SIGTERM) == 0
    worker.extra_env = {}
    worker.start()
    worker.wait_ready()
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))  # every id again
    report, waited = drain_and_verify(broker, names, workers)
    record(
        reliability,
        "F3a graceful stop with an open transaction, then every event again",
        2 * len(stream.records),
        1,
        report,
        waited,
    )


async def rewind_group(broker: Broker, names: Names, by: int) -> dict[str, int]:
    """Commit older offsets for the (stopped) worker's group, as a broker that read back a
    stale committed offset would report them; returns what was rewound per input partition."""
    committed = await committed_offsets(broker.bootstrap, names.app_id)
    older = {tp: max(off - by, 0) for tp, off in committed.items() if tp.topic == names.input_topic}
    consumer = AIOKafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=names.app_id, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(sorted(older))
        await consumer.commit({tp: OffsetAndMetadata(off, "") for tp, off in older.items()})
    finally:
        await consumer.stop()
    return {f"{tp.topic}-{tp.partition}": committed[tp] - off for tp, off in older.items()}


@pytest.mark.parametrize("data_dir", ["same", "wiped"])
def test_f13_a_stale_committed_offset_does_not_re_forward(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability, data_dir: str
) -> None:
    """The group's committed offsets read back older than the last committed transaction (as
    a single broker did after kill -9, F7): each transaction's changelog record of its source
    offsets, committed atomically with the output, must win, so nothing is forwarded twice;
    also when the store is rebuilt from the changelog."""
    worker = started(broker, names, workers)
    stream = build_stream(4_000 * SCALE, 0.1, seed=13)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    drain_and_verify(broker, names, workers)
    assert worker.kill(signal.SIGTERM) == 0
    rewound = asyncio.run(rewind_group(broker, names, by=300))
    assert all(n > 0 for n in rewound.values()), rewound
    if data_dir == "wiped":
        shutil.rmtree(worker.data_dir)
    worker.start()
    worker.wait_ready()
    report, waited = drain_and_verify(broker, names, workers)
    record(
        reliability,
        "F13 stale committed offsets (group rewound 300/partition; same and wiped dir)",
        len(stream.records),
        len(rewound),
        report,
        waited,
    )
    assert "returned a stale committed offset" in worker.log_text()


def test_f14_records_the_consumer_skipped_are_read_again(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """F14: the consumer moves past fetched records without delivering them, and no later
    record arrives to reveal the gap (seen after graceful broker restarts: the worker stalled
    for good with every task running). The stall watchdog must seek back and finish."""
    settings = settings_of(broker, names, partitions=4)
    asyncio.run(ensure_topics(settings, changelog_topic_name(settings)))
    stream = scaled_stream(4_000, seed=14)
    # Everything is in the input before the worker starts, so nothing arrives after the skip.
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    worker = Worker(
        broker,
        names,
        extra_env={
            "DEDUPE_FAULT_INJECTION": "processed=skip-fetched@300",
            "DEDUPE_STALL_TIMEOUT": "3s",
        },
    )
    workers.append(worker)
    worker.start()
    report, waited = drain_and_verify(broker, names, workers, timeout=300)
    log_text = worker.log_text()
    assert "fault injection: the consumer skips" in log_text
    assert "seeking it back" in log_text, log_text[-4000:]
    record(
        reliability, "F14 consumer skips fetched records", len(stream.records), 1, report, waited
    )
