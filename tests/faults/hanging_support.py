"""A hanging transaction made on purpose, for the fault rows of the hanging-transaction repair
(app/eos/hanging.py): F8c and the epoch-overflow row. What a broker that dropped a
transaction's markers leaves behind (fault row F6 once did, in CI): records of a transaction
the coordinator does not know, holding a partition's last stable offset."""

from __future__ import annotations

import asyncio
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition as TP

from scripts.topic_reader import end_offsets
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tests.support import Broker, Names

VERIFICATION = "transaction.partition.verification.enable"


async def leave_a_hanging_transaction(bootstrap: str, transactional_id: str, tp: TP) -> int:
    """Write, with the task's own transactional id, a transaction on changelog partition ``tp``
    that the transaction coordinator does not know of: what a broker that dropped its markers
    leaves (F6). The partition is never added to the transaction (the broker accepts that
    only with partition verification off), and the producer then dies without ending it. Its
    records are copies of the partition's last committed seen-id records: the same ids with the
    same values, so however it ends, the state does not change. Returns how many it holds."""
    reader = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, isolation_level="read_committed", enable_auto_commit=False
    )
    await reader.start()
    try:
        reader.assign([tp])
        end = (await reader.end_offsets([tp]))[tp]
        reader.seek(tp, max(0, end - 200))
        copies: list[tuple[bytes, bytes]] = []
        while await reader.position(tp) < end:
            batch = await reader.getmany(tp, timeout_ms=2000)
            copies += [
                (m.key, m.value)
                for m in batch.get(tp, [])
                if m.key is not None and m.value is not None and m.key != SOURCE_OFFSETS_KEY
            ]
    finally:
        await reader.stop()
    assert copies, f"no seen-id records in {tp}"
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=transactional_id)
    await producer.start()  # InitProducerId: the next start of the worker's producer bumps it
    await producer.begin_transaction()
    producer._txn_manager._txn_partitions.add(tp)  # "added": no AddPartitionsToTxn is sent
    for key, value in copies[-20:]:
        await producer.send(tp.topic, value, key=key, partition=tp.partition)
    await producer.flush()
    await producer._sender.close()  # dies: no EndTxn
    await producer.client.close()
    return len(copies[-20:])


def hang_a_transaction(broker: Broker, names: Names, tp: TP) -> tuple[int, int]:
    """Leave a transaction open on changelog partition ``tp`` with its task's transactional id
    (partition verification off broker-wide meanwhile); returns (records it holds, the
    partition's log end). Fails the test unless the partition's last stable offset stays
    short of its end."""
    cluster_wide = ("--entity-type", "brokers", "--entity-default")
    broker.alter_configs(*cluster_wide, "--add-config", f"{VERIFICATION}=false")
    try:
        # The setting reaches the broker a moment later: until then the write is refused.
        deadline = time.monotonic() + 60
        while True:
            try:
                held = asyncio.run(
                    leave_a_hanging_transaction(
                        broker.bootstrap, f"{names.app_id}-{names.input_topic}-{tp.partition}", tp
                    )
                )
                break
            except KafkaError:
                assert time.monotonic() < deadline, "the broker kept verifying partitions"
                time.sleep(1)
    finally:
        broker.alter_configs(*cluster_wide, "--delete-config", VERIFICATION)
    stable = asyncio.run(end_offsets(broker.bootstrap, tp.topic))[tp.partition]
    end = asyncio.run(end_offsets(broker.bootstrap, tp.topic, isolation_level="read_uncommitted"))
    assert stable < end[tp.partition], "no transaction was left open: the test would prove nothing"
    return held, end[tp.partition]
