"""The transactions-v2 flow (app/eos/txn_v2.py) through aiokafka's real producer, sender,
handlers and transaction state, on a mock network client (tests/unit/app/eos/kafka_mock.py):
what the producer sends after each answer of the broker. Each case is one the Java client's
``TransactionManager`` handles and aiokafka's own state did not (apache/kafka
``clients/.../producer/internals/TransactionManager.java``: ``transactionStarted``,
``maybeTransitionToErrorState``, ``TxnOffsetCommitHandler``, ``EndTxnHandler``)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import GroupAuthorizationFailedError, KafkaError, KafkaTimeoutError
from aiokafka.structs import TopicPartition

from app.eos.producer import is_commit_refused, producer_id_and_epoch
from app.eos.txn_v2 import TransactionAbortable
from tests.unit.app.eos.kafka_mock import (
    END_TXN,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    MockClient,
    mock_producer,
    produced,
)

TRANSACTION_ABORTABLE, CONCURRENT_TRANSACTIONS, GROUP_AUTHORIZATION_FAILED = 120, 51, 30
MESSAGE_TOO_LARGE = 10
SOURCE = TopicPartition("in", 0)


@pytest.fixture
async def started() -> AsyncIterator[tuple[AIOKafkaProducer, MockClient]]:
    producer, client = mock_producer()
    await producer.start()
    try:
        yield producer, client
    finally:
        await asyncio.wait_for(producer.stop(), 5)


async def send(producer: AIOKafkaProducer, partition: int = 0) -> asyncio.Future[object]:
    fut: asyncio.Future[object] = await producer.send("out", b"v", key=b"k", partition=partition)
    return fut


def ends(client: MockClient) -> list[tuple[bool, int, int]]:
    """(commit?, producer id, epoch) of every EndTxn sent."""
    return [(r.committed, r.producer_id, r.producer_epoch) for r in client.sent(END_TXN)]


async def test_an_offset_commit_refused_as_abortable_is_aborted_on_the_broker(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """TRANSACTION_ABORTABLE on TxnOffsetCommit: aiokafka forgets the transaction's
    partitions, then ends the abort locally; under v2 the broker added them itself, so its
    transaction stayed open and the epoch unbumped. The abort must send EndTxn(abort)."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer))
    client.prepare(TXN_OFFSET_COMMIT, error=TRANSACTION_ABORTABLE)
    with pytest.raises(TransactionAbortable):
        await producer.send_offsets_to_transaction({SOURCE: 10}, "grp")
    with pytest.raises(TransactionAbortable):
        await producer.commit_transaction()  # the producer refuses
    await producer.abort_transaction()
    assert ends(client) == [(False, 1000, 0)]
    assert producer_id_and_epoch(producer) == (1000, 1)  # the bumped epoch, adopted
    # The next transaction runs on it, from sequence 0.
    await producer.begin_transaction()
    await (await send(producer))
    await producer.commit_transaction()
    assert produced(client)[-1] == ("out", 0, (1000, 1, 0))
    assert ends(client)[-1] == (True, 1000, 1)


async def test_an_offset_commit_refused_for_the_group_is_aborted_on_the_broker(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """GROUP_AUTHORIZATION_FAILED on TxnOffsetCommit, the same way (aiokafka's own handler
    makes the transaction abortable there)."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer))
    client.prepare(TXN_OFFSET_COMMIT, error=GROUP_AUTHORIZATION_FAILED)
    with pytest.raises(GroupAuthorizationFailedError):
        await producer.send_offsets_to_transaction({SOURCE: 10}, "grp")
    await producer.abort_transaction()
    assert ends(client) == [(False, 1000, 0)]


async def test_offsets_alone_start_the_transaction(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """A transaction whose only member is the group's offsets (TxnOffsetCommit adds the offsets
    partition under v2) also ends on the broker after an abortable error."""
    producer, client = started
    await producer.begin_transaction()
    client.prepare(TXN_OFFSET_COMMIT, error=TRANSACTION_ABORTABLE)
    with pytest.raises(TransactionAbortable):
        await producer.send_offsets_to_transaction({SOURCE: 10}, "grp")
    await producer.abort_transaction()
    assert ends(client) == [(False, 1000, 0)]


async def test_a_transaction_that_never_started_ends_locally(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    producer, client = started
    await producer.begin_transaction()
    await producer.abort_transaction()
    await producer.begin_transaction()
    await producer.commit_transaction()
    assert ends(client) == []


async def test_concurrent_transactions_on_the_offset_commit_is_retried(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """CONCURRENT_TRANSACTIONS on TxnOffsetCommit (under v2 the group coordinator adds the
    offsets partition, and the coordinator still writes the previous transaction's markers):
    aiokafka raised it in its sender task, which ended, and the producer with it."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer))
    client.prepare(TXN_OFFSET_COMMIT, error=CONCURRENT_TRANSACTIONS)
    client.prepare(TXN_OFFSET_COMMIT, error=CONCURRENT_TRANSACTIONS)
    await asyncio.wait_for(producer.send_offsets_to_transaction({SOURCE: 10}, "grp"), 5)
    await producer.commit_transaction()
    assert len(client.sent(TXN_OFFSET_COMMIT)) == 3
    assert ends(client) == [(True, 1000, 0)]


@pytest.mark.parametrize("error", [TRANSACTION_ABORTABLE, MESSAGE_TOO_LARGE])
async def test_a_failed_batch_makes_the_producer_refuse_to_commit(
    started: tuple[AIOKafkaProducer, MockClient], error: int
) -> None:
    """A record batch that failed for good fails its transaction in the producer itself
    (Java's ``handleFailedBatch``), not only its own future: whoever commits without looking
    at every send future cannot commit a transaction that lost records."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer, 1))
    client.prepare(PRODUCE, error=error)
    failed = await send(producer, 0)
    with pytest.raises(KafkaError):
        await failed
    with pytest.raises(KafkaError) as refused:
        await producer.commit_transaction()
    assert is_commit_refused(producer, refused.value)
    assert ends(client) == []  # no EndTxn(commit)
    await producer.abort_transaction()
    assert ends(client) == [(False, 1000, 0)]


async def test_a_refused_commit_is_a_plain_abort(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """TRANSACTION_ABORTABLE on EndTxn(commit): a known outcome (not committed); the abort
    that follows ends it on the broker and bumps the epoch."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer))
    client.prepare(END_TXN, error=TRANSACTION_ABORTABLE)
    with pytest.raises(TransactionAbortable) as refused:
        await producer.commit_transaction()
    assert is_commit_refused(producer, refused.value)
    await producer.abort_transaction()
    assert ends(client) == [(True, 1000, 0), (False, 1000, 0)]
    assert producer_id_and_epoch(producer) == (1000, 1)


async def test_an_end_answered_with_a_new_producer_id_moves_the_records_to_it(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """The epoch ran out (KIP-890: the coordinator hands out a new producer id at epoch 0):
    the next transaction's batches carry the new id, from sequence 0 on every partition."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer, 0))
    await (await send(producer, 0))
    client.prepare(END_TXN, producer_id=2000, producer_epoch=0)
    await producer.commit_transaction()
    await producer.begin_transaction()
    await (await send(producer, 0))
    await producer.commit_transaction()
    assert [h for _, _, h in produced(client)] == [(1000, 0, 0), (1000, 0, 1), (2000, 0, 0)]
    assert ends(client) == [(True, 1000, 0), (True, 2000, 0)]


async def test_a_lost_end_answer_is_retried_and_the_retry_learns_the_epoch(
    started: tuple[AIOKafkaProducer, MockClient],
) -> None:
    """EndTxn reached the coordinator but its answer was lost: the sender sends it again
    with the same epoch, and the coordinator answers the retry with the epoch it bumped to
    (``TransactionCoordinator``: ``retryOnEpochBump``), which the producer adopts."""
    producer, client = started
    await producer.begin_transaction()
    await (await send(producer))

    def done_but_lost(_req: object) -> BaseException:
        client.epoch += 1  # the coordinator ended it and bumped the epoch
        return KafkaTimeoutError("the answer was lost")

    client.prepare(END_TXN, done_but_lost)
    client.prepare(END_TXN, producer_id=1000, producer_epoch=1)  # the retry's answer
    await asyncio.wait_for(producer.commit_transaction(), 5)
    assert ends(client) == [(True, 1000, 0), (True, 1000, 0)]
    assert producer_id_and_epoch(producer) == (1000, 1)
