"""Commit one task's open transaction, in numbered steps, and say how it ended.

``Committer.commit`` is called with the task's lock held (no record is half-processed) and
returns a :class:`CommitResult`; the manager acts on it (apply the stores' staged writes, stop
the task, rejoin). The commit never decides what happens to the task or the stores.

Steps (``# Step N.`` in :meth:`Committer.commit`):

1. Nothing to do unless a transaction is open; one without a processed record is aborted.
2. Pull the stores' staged writes of the partition (they are the transaction's changelog
   records, one per key) and the changelog record of the task's source offsets (the store
   keeps it: after a rebalance it says where the task starts) into the open changelog batch,
   then hand every open batch to the producer. One batch per partition: a second batch of the
   same partition would wait for the first one's acknowledgement (the producer keeps one
   request in flight per partition), a second round trip to the brokers in every commit.
3. Wait until the broker acknowledged every send; the first send error fails the
   transaction. Nothing was asked to commit yet, so aborting is exact.
4. Add the consumed offsets to the transaction (``TxnOffsetCommit``). After the sends' answers,
   not beside them as the Java producer sends it (``TransactionManager.nextRequest`` holds back
   only EndTxn): under transactions v2 both add a partition to the transaction at its
   coordinator, which refuses one while the other's change is being written
   (CONCURRENT_TRANSACTIONS) and has it retried after a back-off; overlapped, a three-broker
   commit took longer, not shorter (the A/B is in the commit that made this order explicit).
5. Ask to commit (``EndTxn``). Fenced: another owner took over. Refused (the broker answered
   TRANSACTION_ABORTABLE, KIP-890): it did not commit; abort it. An answer lost (timeout, lost
   connection, a stop) leaves the outcome unknown: never abort then.
6. Unknown outcome: close the producer and start one with the same transactional id
   (``InitProducerId`` completes or aborts the pending transaction on the broker); the group's
   committed offsets then say whether it committed.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from adapters.built_batches import append_pairs
from app.eos.broker import BrokerReader
from app.eos.collector import retrieve_exception_later
from app.eos.metrics import COMMIT_FAILURES
from app.eos.producer import (
    TransactionalProducers,
    abandon,
    is_commit_refused,
    is_fenced,
    send_lingering,
)
from app.eos.task import Task
from tables.protocol import ChangelogSource, SourceOffsetStore
from tables.source_offsets import SOURCE_OFFSETS_KEY, encode_source_offsets

log = logging.getLogger(__name__)


class Outcome(enum.Enum):
    """How a commit (or an abort) ended."""

    #: No transaction was open.
    NOTHING = "nothing"
    #: Committed: the stores may apply the transaction's staged writes.
    COMMITTED = "committed"
    #: Aborted, with no processed record in it: the task goes on.
    ABORTED = "aborted"
    #: Another owner initialised the transactional id: the task must stop at once.
    FENCED = "fenced"
    #: Did not commit (aborted, or found not committed): the partition must be re-read.
    FAILED = "failed"


@dataclass(frozen=True)
class CommitResult:
    outcome: Outcome
    #: COMMITTED: offset of the transaction's last record per changelog topic.
    changelog_offsets: dict[str, int] = field(default_factory=dict)
    #: FENCED, FAILED: the error met.
    error: BaseException | None = None
    #: FAILED: why, for the log.
    why: str = ""
    #: FAILED: the kind of failure (the ``reason`` label of ``dedupe_commit_failures_total``):
    #: ``error``, or ``unknown_outcome`` (the commit's answer was lost and it had not
    #: committed).
    reason: str = "error"


def failed(task: Task, reason: str) -> None:
    """Count a transaction that will not commit (``dedupe_commit_failures_total``), when the
    failure is known: a stalled commit shows in the metric while it still waits."""
    COMMIT_FAILURES.labels(str(task.partition), reason).inc()


class Committer:
    """Commits tasks' transactions (see the module docstring)."""

    def __init__(
        self,
        producers: TransactionalProducers,
        broker: BrokerReader,
        group_id: str,
        timeout: float,
    ) -> None:
        self.producers = producers
        self.broker = broker
        self.group_id = group_id
        self.timeout = timeout
        #: The store and changelog topic that keep each transaction's source offsets.
        self._source_offsets: tuple[SourceOffsetStore, str] | None = None
        #: Stores whose staged writes go to a changelog topic, with the topic.
        self._changelogs: list[tuple[ChangelogSource, str]] = []

    def add_changelog(self, store: ChangelogSource, topic: str) -> None:
        """Every commit pulls ``store``'s staged writes into the transaction, as records of
        ``topic`` (the task's partition of it)."""
        self._changelogs.append((store, topic))

    def changelog_topics(self) -> list[str]:
        """The changelog topics the transactions write, in registration order."""
        return [topic for _, topic in self._changelogs]

    def keep_source_offsets(self, store: SourceOffsetStore, topic: str) -> None:
        """Every transaction also writes its source offsets to ``topic`` (key
        :data:`~tables.source_offsets.SOURCE_OFFSETS_KEY`) and stages them in ``store``. One
        store per worker does this."""
        if self._source_offsets is not None:
            raise RuntimeError("source offsets are already kept by another table")
        self._source_offsets = (store, topic)

    @property
    def source_offsets_kept(self) -> tuple[SourceOffsetStore, str] | None:
        """The store and changelog topic of :meth:`keep_source_offsets` (None: none)."""
        return self._source_offsets

    async def commit(self, task: Task) -> CommitResult:
        # Step 1. Nothing to do unless a transaction is open; an empty one is aborted.
        if not task.in_transaction:
            return CommitResult(Outcome.NOTHING)
        if not task.dirty:
            return await self.abort(task)
        producer = task.producer
        assert producer is not None
        offsets = dict(task.offsets)
        timeout = self.timeout
        try:
            # Step 2. The staged writes and the source offsets' record as changelog records,
            # then every open batch.
            await asyncio.wait_for(self.pull_changelogs(task), timeout)
            await asyncio.wait_for(self._record_source_offsets(task, offsets), timeout)
            await asyncio.wait_for(task.collector.send_all(producer), timeout)
            # Step 3. Every send acknowledged; the first send error fails the transaction.
            await asyncio.wait_for(send_lingering(producer), timeout)
            await asyncio.wait_for(task.collector.delivered(), timeout)
            changelog_offsets = task.collector.changelog_offsets()
            # Step 4. The consumed offsets join the transaction.
            await asyncio.wait_for(
                producer.send_offsets_to_transaction(offsets, self.group_id), timeout
            )
        except Exception as exc:
            if is_fenced(producer, exc):
                return CommitResult(Outcome.FENCED, error=exc)
            return await self._abort_failed(
                task, exc, f"transaction failed before the commit: {exc!r}"
            )
        # Step 5. Ask to commit.
        request: asyncio.Future[None] | None = None
        try:
            request = asyncio.ensure_future(producer.commit_transaction())
            await asyncio.wait_for(asyncio.shield(request), timeout)
        except asyncio.CancelledError:
            abandon(request)  # stopped with the request out: the outcome is unknown here
            raise
        except (TimeoutError, KafkaError, OSError) as exc:
            abandon(request)
            if is_fenced(producer, exc):
                return CommitResult(Outcome.FENCED, error=exc)
            if is_commit_refused(producer, exc):
                # A known outcome: not committed. A plain abort, as before the commit.
                return await self._abort_failed(
                    task, exc, f"the broker refused the commit: {exc!r}"
                )
            # Step 6. Unknown outcome: never abort; ask the broker.
            if not await self._did_commit(task, offsets, exc):
                failed(task, "unknown_outcome")
                return CommitResult(
                    Outcome.FAILED,
                    error=exc,
                    why="the transaction did not commit (outcome was unknown)",
                    reason="unknown_outcome",
                )
        return CommitResult(Outcome.COMMITTED, changelog_offsets=changelog_offsets)

    async def _abort_failed(self, task: Task, exc: BaseException, why: str) -> CommitResult:
        """A transaction known not to commit: counted, aborted, FAILED (FENCED when the abort
        meets another owner)."""
        # Counted before the abort, which waits for the brokers when they are the cause.
        failed(task, "error")
        aborted = await self.abort(task)
        if aborted.outcome is Outcome.FENCED:
            return aborted
        return CommitResult(Outcome.FAILED, error=exc, why=why)

    async def abort(self, task: Task) -> CommitResult:
        """Abort the open transaction: ABORTED, or FENCED. An abort that fails otherwise
        replaces the producer (``InitProducerId`` of the new one aborts what is open)."""
        producer = task.producer
        assert producer is not None
        aborting = asyncio.ensure_future(producer.abort_transaction())
        retrieve_exception_later(aborting)
        try:
            await asyncio.wait_for(asyncio.shield(aborting), self.timeout)
        except Exception as exc:
            if is_fenced(producer, exc):
                return CommitResult(Outcome.FENCED, error=exc)
            aborting.cancel()  # the producer is dropped: nothing will answer it
            log.warning("partition %d: abort failed (%r); recreating producer", task.partition, exc)
            await self.producers.close(producer)
            task.producer = await self.producers.start(task.partition)
        return CommitResult(Outcome.ABORTED)

    async def pull_changelogs(self, task: Task) -> None:
        """Add each store's staged writes of the task's partition to the transaction, as
        records of the store's changelog partition (the same partition number)."""
        producer = task.producer
        assert producer is not None
        collector = task.collector
        for store, topic in self._changelogs:
            tp = TopicPartition(topic, task.partition)
            collector.add_changelog_target(tp, self.producers.changelog_batch)
            await collector.extend(
                producer, tp, store.changelog_records(task.partition), append_pairs
            )

    async def _record_source_offsets(
        self, task: Task, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Add a changelog record with this transaction's source offsets to the task's open
        batch of that changelog partition (after the staged writes: the transaction's last
        changelog record there) and stage it in the store."""
        kept = self._source_offsets
        if kept is None:
            return
        store, topic = kept
        # Every source partition of the task, not only those with records in this transaction:
        # the record replaces the previous one (the offsets of the others are unchanged).
        positions = {**task.positions, **offsets}
        value = encode_source_offsets({tp.topic: off for tp, off in positions.items()})
        producer = task.producer
        assert producer is not None
        collector = task.collector
        tp = TopicPartition(topic, task.partition)
        collector.add_changelog_target(tp, self.producers.changelog_batch)
        await collector.append(producer, tp, SOURCE_OFFSETS_KEY, value)
        store.stage_source_offsets(task.partition, value)

    async def _did_commit(
        self, task: Task, offsets: Mapping[TopicPartition, int], exc: BaseException
    ) -> bool:
        log.warning(
            "partition %d: commit outcome unknown (%r); recreating producer %s",
            task.partition,
            exc,
            task.transactional_id,
        )
        old = task.producer
        assert old is not None
        await self.producers.close(old)
        # Retries until the coordinator answers; the pending transaction is then complete.
        task.producer = await self.producers.start(task.partition)
        committed = await self.broker.committed_offsets_retrying(list(offsets))
        if all(committed.get(tp) == off for tp, off in offsets.items()):
            log.warning("partition %d: the transaction did commit", task.partition)
            return True
        return False
