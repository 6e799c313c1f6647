"""F28: under transactions v2 every commit bumps the producer epoch, and when it runs out the
coordinator hands the transactional id a new producer id (KIP-890; ``TransactionMetadata
.isEpochExhausted``, ``TransactionCoordinator.endTransaction``). Reached here for real, on the
real broker, with the worker's transactional id: 33,000 transactions, the last ones one-record
transactions of the worker's own producer class, across the overflow, after which it runs on the
new producer id from sequence 0.

All 33,000 run through the producer in ``make soak`` (some 4 minutes at ~150 a second). In
``make test`` the first ones are empty transactions ended with EndTxn(abort) alone (each bumps
the epoch as a commit does, at ~2,500 a second), up to :data:`THROUGH_PRODUCER` transactions
short of the overflow; the rest, the overflow among them, run through the producer.

Before the run, a transaction of the old producer id is left open on the task's changelog
partition (what a broker that dropped its markers leaves: tests/faults/hanging_support.py).
Once the id has rotated, no producer of the transactional id can end it any more: the worker's
repair (app/eos/hanging.py) must see that the old producer id holds it (DescribeProducers) and
write the markers for that id (WriteTxnMarkers), then go on exactly once. A repair that ended it
with the producer's own, new id would leave the changelog open and the worker waiting for good.

How to run: part of ``make test-faults``; adds the row "F28" to docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import signal
import time

import pytest
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.structs import TopicPartition as TP

from app.eos.producer import TransactionalProducers, producer_id_and_epoch
from app.eos.txn_messages import EndTxnV5, InitProducerIdV5
from app.eos.txn_protocol import detect
from app.settings import Settings
from scripts.streams import build_stream, produce
from scripts.topic_admin import create_topics
from scripts.topic_reader import end_offsets
from tests.faults.conftest import SCALE, Reliability
from tests.faults.hanging_support import hang_a_transaction
from tests.faults.kafka_frames import CONCURRENT_TRANSACTIONS
from tests.faults.scenario import drain_and_verify, record, settings_of, started
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = [pytest.mark.faults, pytest.mark.v2_only]

#: Transactions run with the worker's transactional id: past the 32,767 epochs of one producer
#: id whatever epoch it started from.
TRANSACTIONS = 33_000
#: How many of them run through the worker's producer in ``make test`` (all in the soak).
THROUGH_PRODUCER = TRANSACTIONS if SCALE > 1 else 500
#: The epoch a producer id runs out at (``TransactionMetadata.isEpochExhausted``: at
#: Short.MAX_VALUE - 1 the next end hands out a new id).
LAST_EPOCH = 32_766
#: Progress is printed this often (the run takes minutes in the soak).
EVERY = 5_000


async def end_empty_transactions(settings: Settings, transactional_id: str, epoch: int) -> int:
    """End empty transactions of ``transactional_id`` with EndTxn(abort) alone (a new session
    first: InitProducerId) until its epoch is ``epoch``; each bumps the epoch. Returns how many
    ended."""
    client = AIOKafkaClient(bootstrap_servers=settings.bootstrap_servers)
    await client.bootstrap()
    try:
        node = await client.coordinator_lookup(CoordinationType.TRANSACTION, transactional_id)
        answer = await client.send(node, InitProducerIdV5(transactional_id, 60_000))
        assert answer.error_code == 0, answer
        pid, now = answer.producer_id, answer.producer_epoch
        ended = 0
        while now < epoch:
            answer = await client.send(node, EndTxnV5(transactional_id, pid, now, 0))
            if answer.error_code == CONCURRENT_TRANSACTIONS:  # the last end is completing
                await asyncio.sleep(0.005)
                continue
            assert answer.error_code == 0, answer
            assert answer.producer_id == pid, "the producer id rotated before the producer's run"
            now = answer.producer_epoch
            ended += 1
        return ended
    finally:
        await client.close()


async def run_transactions(
    broker: Broker, names: Names, partition: int
) -> tuple[list[tuple[int, int]], int]:
    """:data:`TRANSACTIONS` transactions of partition ``partition``'s transactional id (the
    module docstring), the producer's one record each on a topic of their own. Returns the
    producer's (producer id, epoch) at its start and at each change of producer id, its last,
    and how many transactions were empty."""
    settings = settings_of(broker, names, 4, {"DEDUPE_TRANSACTION_PROTOCOL": "v2"})
    producers = TransactionalProducers(settings, lambda: False)
    producers.use_protocol(await detect(settings))
    transactional_id = producers.transactional_id(partition)
    empty = 0
    if THROUGH_PRODUCER < TRANSACTIONS:
        # Half the producer's run short of the overflow: the run crosses it.
        empty = await end_empty_transactions(
            settings, transactional_id, LAST_EPOCH - THROUGH_PRODUCER // 2
        )
    scratch = f"{names.output_topic}-epochs"
    await create_topics(broker.bootstrap, [scratch], 1)
    producer = await producers.start(partition)
    ids = [producer_id_and_epoch(producer)]
    started_at = time.monotonic()
    try:
        for i in range(1, TRANSACTIONS - empty + 1):
            await producer.begin_transaction()
            await producer.send(scratch, b"%d" % i, partition=0)
            await producer.commit_transaction()
            now = producer_id_and_epoch(producer)
            if now[0] != ids[-1][0]:
                ids.append(now)
            if i % EVERY == 0:
                rate = i / (time.monotonic() - started_at)
                print(f"  {i:,} transactions ({rate:,.0f}/s), producer id and epoch {now}")
        ids.append(producer_id_and_epoch(producer))
    finally:
        await producers.close(producer)
    committed = (await end_offsets(broker.bootstrap, scratch))[0]
    assert committed == 2 * (TRANSACTIONS - empty), f"{committed}: a record and a marker each"
    return ids, empty


def test_an_epoch_run_out_rotates_the_producer_id_and_the_old_ids_hang_is_repaired(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    stream = build_stream(20_000, 0.1, seed=28)
    half = len(stream.records) // 2
    worker = started(broker, names, workers)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[:half]))
    wait_drained(broker, names, timeout=300, workers=workers)
    worker.kill(signal.SIGTERM)
    changelog = TP(names.changelog_topic, 0)
    held, end = hang_a_transaction(broker, names, changelog)

    began = time.monotonic()
    ids, empty = asyncio.run(run_transactions(broker, names, 0))
    took = time.monotonic() - began
    print(
        f"\nF28: {TRANSACTIONS:,} transactions ({empty:,} empty, ended by EndTxn alone) in "
        f"{took:.0f} s; the producer's (id, epoch) at its start, at each new id, at its end: {ids}"
    )
    start, *rotated, last = ids
    assert len(rotated) == 1, f"the producer id did not rotate exactly once: {ids}"
    old_id, new_id = start[0], rotated[0][0]
    assert rotated[0][1] == 0 and last[0] == new_id and last[1] > 0, ids

    hung_at = time.monotonic()
    worker.start()
    worker.wait_ready(timeout=180)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records[half:]))
    report, _ = drain_and_verify(broker, names, workers, timeout=300)
    record(
        reliability,
        f"F28 producer epoch run out ({TRANSACTIONS:,} transactions, the overflow in the "
        "worker's producer: a new producer id), then a transaction of the old id left open on a "
        "changelog partition",
        len(stream.records),
        1,
        report,
        time.monotonic() - hung_at,
    )
    log = worker.log_text()
    assert f"wrote commit markers for the older producer id {old_id}" in log, log[-3000:]
    assert f"producer id {new_id}" in log
    settled = asyncio.run(end_offsets(broker.bootstrap, changelog.topic))[0]
    assert settled > end, (settled, end, held)
