"""The commit protocol (``app.eos.commit.Committer``), one outcome per test, with a fake
producer: what each failure at each step becomes, and what is never done (an abort after the
commit request went out). The real broker's side of the same paths is in tests/faults (F2, F8,
F8a); these run in milliseconds, so a change to the protocol is judged at once."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from aiokafka.errors import KafkaConnectionError, KafkaTimeoutError, ProducerFenced

from app.eos import Outcome
from app.eos.txn_v2 import TransactionAbortable
from app.worker.metrics import REGISTRY
from tests.unit.app.eos.commit_fakes import CHANGELOG, SOURCE, TIMEOUT, Builder, Producer, setup


async def test_a_commit_sends_everything_then_asks_to_commit_once() -> None:
    committer, task, producer, producers, _, store = setup()
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    # One batch per partition: the source offsets' record rides in the changelog's batch (a
    # second batch of that partition would wait for the first one's acknowledgement).
    assert producer.calls == [
        "send_batch events-clean",
        f"send_batch {CHANGELOG.topic}",
        "flush",
        "send_offsets",
        "commit",
    ]
    assert producer.offsets == [({SOURCE: 12}, "app")]
    # output at 100-101, the two staged writes and the offsets' record at 103-105
    assert result.changelog_offsets == {CHANGELOG.topic: 105}
    assert (CHANGELOG.topic, 3, 3) in producer.sent  # pulled from the store, to partition 3
    # The changelog's batch is built with the changelogs' own compression, the output's with
    # the producer's.
    assert producer.batches_made_by == {"events-clean": "producer", CHANGELOG.topic: "changelog"}
    assert store.staged and store.staged[0][0] == 3
    assert producers.started == []


class AckedLater(Producer):
    """Sends acknowledged a little after they are handed over, each answer noted in ``calls``."""

    def __init__(self) -> None:
        super().__init__()
        self.acknowledging: list[asyncio.Task[None]] = []

    async def send_batch(self, builder: Builder, topic: str, *, partition: int) -> Any:
        answer = await super().send_batch(builder, topic, partition=partition)
        pending: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        async def acknowledge() -> None:
            await asyncio.sleep(TIMEOUT / 10)
            self.calls.append(f"acknowledged {topic}")
            if answer.exception() is not None:
                pending.set_exception(answer.exception())
            else:
                pending.set_result(answer.result())

        self.acknowledging.append(asyncio.ensure_future(acknowledge()))
        return pending


async def test_the_offsets_join_only_once_every_send_is_acknowledged() -> None:
    """Not beside the sends, as the Java producer sends them: under transactions v2 each adds a
    partition to the transaction at its coordinator, which answers CONCURRENT_TRANSACTIONS to
    one while the other's change is written (``TransactionCoordinator
    .handleAddPartitionsToTransaction``) and has it retried after a back-off."""
    producer = AckedLater()
    committer, task, *_ = setup(producer=producer)
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    offsets_at = producer.calls.index("send_offsets")
    assert {"acknowledged events-clean", f"acknowledged {CHANGELOG.topic}"} <= set(
        producer.calls[:offsets_at]
    )


async def test_nothing_open_is_nothing_to_commit() -> None:
    committer, task, producer, *_ = setup(records=0)
    task.in_transaction = False
    assert (await committer.commit(task)).outcome is Outcome.NOTHING
    assert producer.calls == []


async def test_a_transaction_without_a_processed_record_is_aborted() -> None:
    committer, task, producer, *_ = setup(records=0)
    assert (await committer.commit(task)).outcome is Outcome.ABORTED
    assert producer.calls == ["abort"]


async def test_fenced_at_send() -> None:
    committer, task, producer, producers, *_ = setup()
    producer.send_error = ProducerFenced()
    result = await committer.commit(task)
    assert result.outcome is Outcome.FENCED
    assert "commit" not in producer.calls and "abort" not in producer.calls
    assert producers.started == []  # a fenced producer is not replaced: the task stops


async def test_a_send_error_fails_the_transaction_and_aborts_it() -> None:
    committer, task, producer, *_ = setup()
    producer.send_error = KafkaTimeoutError("batch expired")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert "before the commit" in result.why
    assert producer.calls[-1] == "abort" and "commit" not in producer.calls


async def test_the_broker_gone_before_the_commit_fails_and_a_producer_that_cannot_abort_goes() -> (
    None
):
    committer, task, producer, producers, *_ = setup()
    producer.offsets_error = KafkaConnectionError("broker gone")
    producer.abort_error = KafkaConnectionError("broker gone")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert producers.closed == [producer]
    assert task.producer is producers.started[0]  # its InitProducerId aborts what is open


async def test_a_failed_transaction_is_counted_by_reason() -> None:
    committer, task, producer, *_ = setup()
    producer.offsets_error = KafkaTimeoutError("no answer")
    labels = {"partition": "3", "reason": "error"}
    before = REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) or 0.0
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED and result.reason == "error"
    assert REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) == before + 1


async def test_a_lost_commit_answer_that_committed_is_committed_never_aborted() -> None:
    committer, task, producer, producers, broker, _ = setup(committed={SOURCE: 12})
    producer.commit_hangs = True
    result = await committer.commit(task)
    assert result.outcome is Outcome.COMMITTED
    assert "abort" not in producer.calls
    assert producers.closed == [producer] and task.producer is producers.started[0]
    assert broker.asked == [[SOURCE]]


async def test_a_lost_commit_answer_that_did_not_commit_fails_never_aborted() -> None:
    committer, task, producer, producers, _, _ = setup(committed={SOURCE: 10})
    producer.commit_error = KafkaConnectionError("connection lost")
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED
    assert "did not commit" in result.why
    assert "abort" not in producer.calls
    assert task.producer is producers.started[0]


async def test_a_commit_the_broker_refused_is_aborted_not_resolved() -> None:
    """TRANSACTION_ABORTABLE on EndTxn (transactions v2) is an answer: not committed. A plain
    abort follows; the producer is kept and nobody asks the broker what happened."""
    committer, task, producer, producers, broker, _ = setup(committed={SOURCE: 12})
    producer.commit_error = TransactionAbortable("EndTxn(commit)")
    labels = {"partition": "3", "reason": "error"}
    before = REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) or 0.0
    result = await committer.commit(task)
    assert result.outcome is Outcome.FAILED and result.reason == "error"
    assert "refused" in result.why
    assert producer.calls[-2:] == ["commit", "abort"]
    assert broker.asked == [] and producers.started == [] and task.producer is producer
    assert REGISTRY.get_sample_value("dedupe_commit_failures_total", labels) == before + 1


async def test_fenced_at_the_commit() -> None:
    committer, task, producer, producers, broker, _ = setup()
    producer.commit_error = ProducerFenced()
    result = await committer.commit(task)
    assert result.outcome is Outcome.FENCED
    assert broker.asked == [] and producers.started == [] and "abort" not in producer.calls


async def test_an_abort_that_fails_replaces_the_producer() -> None:
    committer, task, producer, producers, *_ = setup(records=0)
    producer.abort_error = KafkaConnectionError("broker gone")
    assert (await committer.commit(task)).outcome is Outcome.ABORTED
    assert producers.closed == [producer] and task.producer is producers.started[0]


async def test_an_abort_that_meets_fencing_is_fenced() -> None:
    committer, task, producer, producers, *_ = setup(records=0)
    producer.abort_error = ProducerFenced()
    assert (await committer.commit(task)).outcome is Outcome.FENCED
    assert producers.started == []


async def test_a_stop_while_the_commit_request_is_out_propagates() -> None:
    """The manager marks the task failed and applies nothing (the outcome is unknown)."""
    committer, task, producer, *_ = setup()
    committer.timeout = 10.0
    producer.commit_hangs = True
    commit = asyncio.ensure_future(committer.commit(task))
    await producer.asked_to_commit.wait()
    commit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await commit
    assert "abort" not in producer.calls
