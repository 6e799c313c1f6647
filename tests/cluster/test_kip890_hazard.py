"""C9: the hazard KIP-890 (transactions v2) closes, shown on the wire, on both protocols.

A Produce request of transaction N is held by the fault proxy (tests/faults/proxy.py) while N
ends without it (abort) and transaction N+1 of the same producer adds the partition; then the
proxy lets it through. The producer redoes N's work in N+1 (as a stream processor does after an
abort: it rewinds and sends the same record again), and N+1 commits.

- v1 (the flow of aiokafka, librdkafka, and the Java client before 4.0): the producer epoch
  stays the same across transactions, so the late request carries the epoch and the next
  sequence number the partition expects, and N+1 has added the partition: the broker appends
  it to N+1 (``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence`` pass, the
  KIP-890 part 1 verification finds the partition in the ongoing transaction). The aborted copy
  commits with N+1, next to the redo: one duplicate in read_committed.
- v2: every EndTxn bumps the epoch (``TransactionCoordinator`` with ``transaction.version``
  2; our ``app/eos/txn_v2.py`` adopts the epoch EndTxn returns), so the late request's epoch
  is old and the broker refuses it; read_committed holds the redo only.

The requests are the ones the producers send, driven step by step by the test (aiokafka's
v1 request classes, which our v1 flow uses, and ``app/eos/txn_messages.py``'s v2 ones): the
timing that makes the hazard is the test's, which a worker run cannot pin down. The worker
itself, on v1, ends a failed transaction by stopping the task and starting it again with a
new producer (``InitProducerId`` bumps the epoch), which fences such a request too; this row
shows what each protocol guarantees without relying on that.

How to run: part of ``make test-cluster``; adds the row "C9" per protocol to
docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.client import AIOKafkaClient, CoordinationType
from aiokafka.conn import AIOKafkaConnection, create_conn
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.protocol.transaction import (
    AddPartitionsToTxnRequest,
    EndTxnRequest,
    InitProducerIdRequest,
)
from aiokafka.record.default_records import DefaultRecordBatchBuilder

from app.eos.txn_messages import EndTxnV5, InitProducerIdV5, ProduceV12
from scripts.kafka_cluster import Cluster
from scripts.kafka_cluster_nodes import Node
from scripts.topic_reader import read_topic, settled_ends
from tests.cluster.support import hanging, leaders
from tests.faults.proxy import Link
from tests.reliability import Reliability
from tests.support import Broker, Names

pytestmark = pytest.mark.faults

#: Kafka error codes (https://kafka.apache.org/protocol#protocol_error_codes).
INVALID_PRODUCER_EPOCH = 47
#: Retriable answers of a coordinator: loading, moving, or still writing the previous
#: transaction's markers (the clients retry these).
LOADING, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS = 14, 15, 16, 51
EVENT = b"event-1"


def batch(producer_id: int, epoch: int, sequence: int) -> bytes:
    """One transactional record batch holding ``EVENT``, as the producer builds it."""
    builder = DefaultRecordBatchBuilder(2, 0, 1, producer_id, epoch, sequence, 1 << 16)
    builder.append(0, int(time.time() * 1000), EVENT, EVENT, [])
    return bytes(builder.build())


def produce(protocol: str, txn_id: str, topic: str, data: bytes) -> Any:
    if protocol == "v2":
        return ProduceV12(txn_id, -1, 30000, {topic: [(0, data)]})
    return ProduceRequest(txn_id, -1, 30000, [(topic, [(0, data)])])


def produce_error(response: Any) -> int:
    """The partition's error code in a Produce answer (v8 or v12 layout)."""
    topics = getattr(response, "responses", None) or response.topics
    return int(topics[0][1][0][1])


class Txns:
    """One transactional id's requests to its coordinator, and to the partition's leader
    through the proxy."""

    def __init__(self, client: AIOKafkaClient, txn_id: str, coordinator: int) -> None:
        self.client, self.txn_id, self.coordinator = client, txn_id, coordinator
        self.producer_id, self.epoch = -1, -1

    async def to_coordinator(self, request: Any) -> Any:
        """Send; retried on the coordinator's retriable answers, as the clients do."""
        for _ in range(300):
            response = await self.client.send(self.coordinator, request)
            code = getattr(response, "error_code", None)
            if code is None:  # AddPartitionsToTxn: per partition
                code = response.errors[0][1][0][1]
            if code not in (LOADING, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT_TRANSACTIONS):
                assert code == 0, f"{type(request).__name__}: error {code}"
                return response
            assert code != NOT_COORDINATOR, "the coordinator moved: a broker is not healthy"
            await asyncio.sleep(0.1)
        raise AssertionError(f"{type(request).__name__}: error {code} for 30 s")

    async def init(self, protocol: str) -> None:
        request = (
            InitProducerIdV5(self.txn_id, 60000)
            if protocol == "v2"
            else InitProducerIdRequest(self.txn_id, 60000)
        )
        response = await self.to_coordinator(request)
        self.producer_id, self.epoch = response.producer_id, response.producer_epoch

    async def add_partition(self, topic: str) -> None:
        await self.to_coordinator(
            AddPartitionsToTxnRequest(self.txn_id, self.producer_id, self.epoch, [(topic, [0])])
        )

    async def end(self, protocol: str, commit: bool) -> None:
        if protocol == "v2":
            response = await self.to_coordinator(
                EndTxnV5(self.txn_id, self.producer_id, self.epoch, int(commit))
            )
            # The bumped epoch (KIP-890): the next transaction's batches carry it.
            self.producer_id, self.epoch = response.producer_id, response.producer_epoch
        else:
            await self.to_coordinator(
                EndTxnRequest(self.txn_id, self.producer_id, self.epoch, commit)
            )


async def run_hazard(
    cluster: Cluster, leader: Node, topic: str, suffix: str, protocol: str
) -> dict[str, Any]:
    """The steps of the module docstring (``leader``: the partition's); returns the late
    request's error code and what read_committed holds."""
    client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=30000)
    await client.bootstrap()
    link = Link(listen_port=leader.proxy_port, target_port=leader.proxied_port).start()
    held: AIOKafkaConnection | None = None
    try:
        # A transactional id whose coordinator is not the partition's leader: the held
        # connection to the leader must not hold N's EndTxn too.
        for i in range(100):
            txn_id = f"kip890-{suffix}-{protocol}-{i}"
            coordinator = int(await client.coordinator_lookup(CoordinationType.TRANSACTION, txn_id))
            if coordinator != leader.id:
                break
        txns = Txns(client, txn_id, coordinator)
        await txns.init(protocol)
        held = await create_conn("127.0.0.1", leader.proxy_port, request_timeout_ms=120000)

        # Transaction N: the partition joins it (v1 asks; v2's broker adds it on the Produce),
        # and its record's request is held on the way.
        if protocol == "v1":
            await txns.add_partition(topic)
        link.hold()
        late = held.send(produce(protocol, txn_id, topic, batch(txns.producer_id, txns.epoch, 0)))
        await asyncio.sleep(1.0)
        # N ends without it.
        await txns.end(protocol, commit=False)
        # Transaction N+1 redoes N's work: the same record, the next sequence (v1: the
        # producer's sequence numbers go on across transactions of one epoch; v2: a new
        # epoch starts at 0).
        redo = batch(txns.producer_id, txns.epoch, 1 if protocol == "v1" else 0)
        if protocol == "v1":
            await txns.add_partition(topic)
            link.heal()
            late_error = produce_error(await late)
            answer = await client.send(leader.id, produce(protocol, txn_id, topic, redo))
        else:
            answer = await client.send(leader.id, produce(protocol, txn_id, topic, redo))
            link.heal()
            late_error = produce_error(await late)
        assert produce_error(answer) == 0, f"the redo was refused: {produce_error(answer)}"
        await txns.end(protocol, commit=True)
    finally:
        if held is not None:
            held.close()
        link.stop()
        await client.close()
    await settled_ends(cluster.bootstrap, topic)
    values = [r.value for r in await read_topic(cluster.bootstrap, topic)]
    return {"late_error": late_error, "copies": values.count(EVENT), "records": len(values)}


@pytest.mark.parametrize("protocol", ["v2", "v1"])
def test_a_produce_of_an_aborted_transaction_delivered_late(
    cluster: Cluster, broker: Broker, names: Names, reliability: Reliability, protocol: str
) -> None:
    topic = names.output_topic

    async def create() -> None:
        admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
        await admin.start()
        try:
            await admin.create_topics([NewTopic(topic, 1, 3)])
        finally:
            await admin.close()

    asyncio.run(create())
    started = time.monotonic()
    deadline = time.monotonic() + 60
    while not (led := leaders(cluster.bootstrap, [topic])):  # until every broker knows it
        assert time.monotonic() < deadline, f"{topic} has no leader 60 s after its creation"
        time.sleep(0.5)
    leader = cluster.broker(led.most_common(1)[0][0])
    seen = asyncio.run(run_hazard(cluster, leader, topic, names.suffix, protocol))
    left_open = hanging(cluster)
    print(f"\nC9 {protocol}: {seen}; find-hanging: {left_open or 'none'}")
    reliability.record(
        "C9 KIP-890's hazard on the wire (no worker): a Produce of aborted transaction N held by "
        "the fault proxy until N+1 added its partition, N+1 redoes it and commits; v1: the "
        "broker appends the late copy to N+1; v2: refused (old epoch)",
        events=1,
        injected=1,
        duplicates=seen["copies"] - 1,
        missing=0 if seen["copies"] else 1,
        recover_s=time.monotonic() - started,
        txn_version=f"{cluster.finalized('transaction.version')} / {protocol}",
    )
    assert not left_open, left_open
    if protocol == "v2":
        assert seen["late_error"] == INVALID_PRODUCER_EPOCH, seen
        assert seen == {**seen, "copies": 1, "records": 1}
    else:
        assert seen["late_error"] == 0, seen
        assert seen == {**seen, "copies": 2, "records": 2}
