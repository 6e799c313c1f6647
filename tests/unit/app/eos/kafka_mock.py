"""A mock of aiokafka's network client, for unit tests of the transaction protocol through
aiokafka's real producer, sender, handlers and transaction state: the test boundary of Kafka's
own ``TransactionManagerTest`` and ``SenderTest``, whose ``MockClient`` answers each request
with what the test prepared (apache/kafka ``clients/src/test/java/org/apache/kafka/clients/
MockClient.java``: ``prepareResponse``).

Each request is built at the version a Kafka 4.3 broker would agree to (``Request.prepare``, as
aiokafka's connection does) and kept in :attr:`MockClient.requests`; its answer is the next one
the test prepared for its API, or the broker's success. The broker's state that the protocol
reads back is kept as a broker would: the producer id and epoch (InitProducerId, and EndTxn v5's
bump), and offsets per partition.

    producer, client = mock_v2_producer()
    client.prepare(TXN_OFFSET_COMMIT, error=TRANSACTION_ABORTABLE)
    await producer.start()
"""

from __future__ import annotations

import asyncio
from collections import defaultdict, deque
from collections.abc import Callable
from io import BytesIO
from typing import Any

from aiokafka import AIOKafkaProducer
from aiokafka.protocol.metadata import MetadataResponse_v0
from aiokafka.record.default_records import DefaultRecordBatch

from adapters.aiokafka_privates import use_client
from app.eos.txn_messages import (
    EndTxnResponse_v5,
    InitProducerIdResponse_v5,
    ProduceResponse_v12,
    TxnOffsetCommitResponse_v5,
)
from app.eos.txn_v2 import use_v2

PRODUCE, INIT_PRODUCER_ID, ADD_PARTITIONS_TO_TXN, ADD_OFFSETS_TO_TXN = 0, 22, 24, 25
END_TXN, TXN_OFFSET_COMMIT = 26, 28
#: The versions of each API a Kafka 4.3 broker supports (ApiVersions), of those used here.
BROKER_VERSIONS = {
    PRODUCE: (3, 13),
    INIT_PRODUCER_ID: (0, 6),
    ADD_PARTITIONS_TO_TXN: (0, 5),
    ADD_OFFSETS_TO_TXN: (0, 4),
    END_TXN: (0, 5),
    TXN_OFFSET_COMMIT: (0, 5),
}
NODE = 0
TOPICS = {"out": 2, "in": 1}
NO_TAGS: dict[int, bytes] = {}

#: A prepared answer: a field -> value mapping overriding the success answer's, an exception
#: to raise (the request's answer lost), or a function of the request returning either.
Prepared = dict[str, Any] | BaseException | Callable[[Any], "dict[str, Any] | BaseException"]


def _roundtrip(response: Any) -> Any:
    """The answer as the client decodes it off the wire."""
    return type(response).decode(BytesIO(response.encode()))


class MockClient:
    """aiokafka's ``AIOKafkaClient`` as the producer and its sender use it (see the module
    docstring)."""

    def __init__(self, cluster: Any) -> None:
        self.cluster = cluster
        self._client_id = "mock-client"
        #: Every request sent, as built (a ``RequestStruct``), in order.
        self.requests: list[Any] = []
        self._prepared: dict[int, deque[Prepared]] = defaultdict(deque)
        self.producer_id, self.epoch = 1000, -1
        self._offsets: dict[tuple[str, int], int] = defaultdict(int)

    # -- what the test says ------------------------------------------------------------------

    def prepare(self, api_key: int, answer: Prepared | None = None, **fields: Any) -> None:
        """The next answer to a request of ``api_key``: the success answer with ``fields``
        changed (``error=N`` sets its error code), or ``answer``."""
        self._prepared[api_key].append(answer if answer is not None else fields)

    def sent(self, api_key: int) -> list[Any]:
        """The requests of ``api_key`` sent so far."""
        return [r for r in self.requests if api_key == r.API_KEY]

    # -- what aiokafka calls -----------------------------------------------------------------

    async def bootstrap(self) -> None:
        return None

    async def coordinator_lookup(self, kind: Any, key: str) -> int:
        return NODE

    async def ready(self, node_id: int, *, group: Any = None) -> bool:
        return True

    def force_metadata_update(self) -> asyncio.Future[bool]:
        fut = asyncio.get_running_loop().create_future()
        fut.set_result(True)
        return fut

    async def _wait_on_metadata(self, topic: str) -> set[int]:
        partitions: set[int] = self.cluster.partitions_for_topic(topic)
        return partitions

    async def _maybe_wait_metadata(self) -> None:
        return None

    def get_random_node(self) -> int:
        return NODE

    async def close(self) -> None:
        return None

    async def send(self, node_id: int, request: Any, *, group: Any = None) -> Any:
        built = request.prepare(BROKER_VERSIONS)
        self.requests.append(built)
        await asyncio.sleep(0)  # an answer is never immediate
        queue = self._prepared[built.API_KEY]
        prepared: Prepared = queue.popleft() if queue else {}
        if callable(prepared):
            prepared = prepared(built)
        if isinstance(prepared, BaseException):
            raise prepared
        return _roundtrip(self._answer(built, dict(prepared)))

    # -- the broker's answers ----------------------------------------------------------------

    def _answer(self, req: Any, change: dict[str, Any]) -> Any:
        error = change.pop("error", 0)
        key, version = req.API_KEY, req.API_VERSION
        if key == INIT_PRODUCER_ID:
            if not error:
                self.epoch += 1
            fields = {"producer_id": self.producer_id, "producer_epoch": self.epoch, **change}
            if version >= 5:
                return InitProducerIdResponse_v5(0, error, *fields.values(), NO_TAGS)
            return req.RESPONSE_TYPE(0, error, *fields.values())
        if key == END_TXN:
            if version < 5:
                return req.RESPONSE_TYPE(0, error)
            if not error:  # KIP-890: every end bumps the epoch
                self.epoch += 1
            fields = {"producer_id": self.producer_id, "producer_epoch": self.epoch, **change}
            if error:
                fields = {"producer_id": -1, "producer_epoch": -1}
            else:
                self.producer_id, self.epoch = fields["producer_id"], fields["producer_epoch"]
            return EndTxnResponse_v5(0, error, *fields.values(), NO_TAGS)
        if key == PRODUCE:
            topics = []
            for name, parts, _tags in req.topic_data:
                answers = []
                for index, _records, _t in parts:
                    offset = -1
                    if not error:
                        offset = self._offsets[name, index]
                        self._offsets[name, index] += 1
                    answers.append((index, error, offset, -1, 0, [], None, NO_TAGS))
                topics.append((name, answers, NO_TAGS))
            return ProduceResponse_v12(topics, 0, NO_TAGS)
        if key == TXN_OFFSET_COMMIT:
            topics = [
                (name, [(p[0], error, NO_TAGS) for p in parts], NO_TAGS)
                for name, parts, _tags in req.topics
            ]
            return TxnOffsetCommitResponse_v5(0, topics, NO_TAGS)
        if key == ADD_PARTITIONS_TO_TXN:
            topics = [(t, [(p, error) for p in parts]) for t, parts in req.topics]
            return req.RESPONSE_TYPE(0, topics)
        if key == ADD_OFFSETS_TO_TXN:
            return req.RESPONSE_TYPE(0, error)
        raise AssertionError(f"no answer for {type(req).__name__}")


def mock_producer(*, v2: bool = True, **kwargs: Any) -> tuple[AIOKafkaProducer, MockClient]:
    """A transactional producer (not started) whose network client is a :class:`MockClient`
    of a one-broker cluster with topics ``out`` (2 partitions) and ``in`` (1); ``v2``: the
    transactions-v2 flow (app/eos/txn_v2.py), else aiokafka's own."""
    producer = AIOKafkaProducer(
        bootstrap_servers="mock:9092",
        transactional_id="tid",
        linger_ms=0,
        retry_backoff_ms=5,
        request_timeout_ms=5000,
        **kwargs,
    )
    if v2:
        use_v2(producer)
    cluster = producer.client.cluster
    topics = [
        (0, topic, [(0, p, NODE, [NODE], [NODE]) for p in range(n)]) for topic, n in TOPICS.items()
    ]
    cluster.update_metadata(MetadataResponse_v0([(NODE, "mock", 9092)], topics))
    client = MockClient(cluster)
    use_client(producer, client)
    return producer, client


def batch_header(records: bytes) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) of a Produce request's record batch."""
    batch = DefaultRecordBatch(records)
    return batch.producer_id, batch.producer_epoch, batch.base_sequence


def produced(client: MockClient) -> list[tuple[str, int, tuple[int, int, int]]]:
    """(topic, partition, batch header) of every batch the producer sent."""
    return [
        (name, index, batch_header(records))
        for req in client.sent(PRODUCE)
        for name, parts, _tags in req.topic_data
        for index, records, _t in parts
    ]
