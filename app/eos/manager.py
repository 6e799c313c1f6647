"""What Faust calls: the transaction manager that replaces Faust's, with its rebalance hooks and
background loops (commits, the stall watchdog). It wires the pieces of ``app.eos`` together;
what a commit's outcome or a failed transaction means for a task is ``lifecycle.py``'s.
Nothing imports it but the transport below."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from aiokafka.structs import TopicPartition
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from faust.types import TP
from mode import Service

from app.eos.batch import BatchHandler, BatchScope, SourceRecord
from app.eos.broker import BrokerReader
from app.eos.commit import Committer
from app.eos.consumer import Consumer, records_held_back, request_rejoin
from app.eos.guards import StallWatchdog, gap_checked
from app.eos.hanging import BrokerMarkers, HangingTransactions, written_by
from app.eos.hooks import NO_HOOKS, ManagerHooks
from app.eos.lifecycle import TaskLife
from app.eos.positions import (
    assign_start_positions,
    confirm_stored_offsets,
    raise_to_stored_offsets,
)
from app.eos.producer import ProducerSupplier
from app.eos.replicas import WATCH_INTERVAL, ReplicaWatch
from app.eos.sends_only import TaskSendsOnly
from app.eos.task import Task, TaskState
from app.eos.task_restart import restart_tasks
from tables.protocol import SourceOffsetStore, StagedState

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)


def next_commit_due(started: float, ended: float, caught_up: bool, interval: float) -> float:
    """When the commit loop commits next, after a commit that ran from ``started`` to
    ``ended``: an interval after its start while the worker is caught up, after its end while
    it is behind (:meth:`TaskTransactionManager._commit_loop` says why)."""
    return (started if caught_up else ended) + interval


class TaskTransactionManager(TaskSendsOnly):
    """Faust's transaction manager, replaced: one transaction per partition task.

    Faust creates it through :class:`Transport` and calls it on rebalances; the batch handler
    opens a scope per batch of one task's records with :meth:`processing_batch`; the factory
    registers the stores whose staged writes follow the transactions (:meth:`register_store`);
    a background loop commits every ``DEDUPE_COMMIT_INTERVAL``.
    """

    #: Commit a task early once its open transaction holds this many records.
    commit_every = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._wakeup = asyncio.Event()
        self.rejoins_requested = 0
        self.app.on_rebalance_complete.connect(self._rebalance_complete)
        #: First offset processed per source partition since the last rebalance (for the log).
        self.first_offsets: dict[TopicPartition, int] = {}
        #: The consumer generation of the last assignment this worker took part in.
        self._generation: int | None = None
        s = self.settings
        #: Its maker's hooks (``app/eos/hooks.py``: the factory's choice; production's do
        #: nothing). Faust makes this manager from the app, so the app carries them; an app
        #: that carries none (a plain Faust app in a test) gets production's.
        self.hooks: ManagerHooks = getattr(self.app, "eos_hooks", NO_HOOKS)
        #: The client supplier the factory chose: every task's producer comes from it.
        supplier: ProducerSupplier = self.app.producer_supplier
        self.producers = supplier(s, lambda: bool(self.should_stop))
        self.broker = BrokerReader(s, self.group_id, self.source_topics, lambda: self.tasks)
        self.committer = Committer(self.producers, self.broker, self.group_id, s.commit_timeout)
        self.replicas = ReplicaWatch(s, self._topics_written)
        self.life = TaskLife(
            self.producers,
            self.committer,
            self.hooks,
            self._request_rejoin,
            lambda: bool(self.should_stop),
        )
        self.tasks: dict[int, Task] = self.life.tasks
        self.hanging = HangingTransactions(
            self.producers,
            BrokerMarkers(s),
            self._written_by,
            lambda task, exc: self.life.transaction_error(task, exc, "ending a hanging one"),
        )
        self.watchdog = StallWatchdog(
            s.stall_timeout,
            self.broker,
            lambda: records_held_back(self.app),
            self._seek_back,
            self._request_rejoin,
        )

    # -- configuration -------------------------------------------------------------------------

    @property
    def settings(self) -> EosSettings:
        settings: EosSettings = self.app.dedupe_settings
        return settings

    @property
    def group_id(self) -> str:
        group: str = self.app.conf.id
        return group

    @property
    def source_topics(self) -> frozenset[str]:
        s = self.settings
        return frozenset({s.input_topic, s.repartition_topic})

    @property
    def stalls(self) -> int:
        """Partitions un-stalled by the watchdog so far."""
        return self.watchdog.stalls

    def transactional_id(self, partition: int) -> str:
        return self.producers.transactional_id(partition)

    def register_store(self, store: StagedState, changelog_topic: str | None = None) -> None:
        """State that follows the transactions (:meth:`TaskLife.register_store`)."""
        self.life.register_store(store, changelog_topic)

    def keep_source_offsets(self, store: SourceOffsetStore, changelog_topic: str) -> None:
        """Every transaction also writes its source offsets to ``changelog_topic``, and ``store``
        keeps them (:meth:`Committer.keep_source_offsets`): see :meth:`_rebalance_complete`."""
        self.committer.keep_source_offsets(store, changelog_topic)

    # -- the agent's side ----------------------------------------------------------------------

    def processing_batch(self, messages: list[SourceRecord], generation_id: int) -> BatchScope:
        """Scope for processing ``messages`` (records of one partition, in offset order, fetched
        in consumer generation ``generation_id``): ``async with tm.processing_batch(msgs, gen)
        as batch: async for start, stop in batch.spans():``, then ``msgs[start:stop]``."""
        return BatchScope(self, messages, generation_id)

    async def gap_checked(self, task: Task, message: SourceRecord) -> bool:
        return await gap_checked(self.broker, self.life.fail, task, message)

    async def first_committed_record(self, tp: TP, start: int, end: int) -> int | None:
        return await self.broker.first_committed_record(tp, start, end)

    def batch_handler(self, handler: BatchHandler) -> BatchHandler:
        """``handler``, as the consumer calls it (through the hooks' wrapper)."""
        return self.hooks.batch_handler(handler, self.tasks, self.broker.stable_end, self._seek)

    def commit_soon(self) -> None:
        self._wakeup.set()

    def fetched(self, tp: TopicPartition, lag: int) -> None:
        """The consumer delivered a batch of ``tp`` whose fetch left ``lag`` offsets at the
        broker (the commit loop's pace follows it: :meth:`_commit_loop`)."""
        task = self.tasks.get(tp.partition)
        if task is not None:
            task.lag[tp] = lag

    def transaction_error(self, task: Task, exc: BaseException, where: str) -> bool:
        """Stop ``task`` after a failed transaction; True when it may still abort (not fenced)."""
        return self.life.transaction_error(task, exc, where)

    async def _seek(self, tp: TopicPartition, position: int) -> None:
        await self.app.consumer.seek_wait({tp: position})

    # -- Faust's side: rebalances and the commit calls we take over ----------------------------

    async def _rebalance_complete(self, sender: Any, **kwargs: Any) -> None:
        """After the recovery, before records flow: start each task at the source offsets
        its store holds when those are past the group's (``positions.py``)."""
        kept = self.committer.source_offsets_kept
        if kept is not None and await raise_to_stored_offsets(self.tasks.values(), kept[0]):
            self.commit_soon()

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """Faust calls this after the agents finished their current records: commit them."""
        partitions = {tp.partition for tp in revoked if tp.topic in self.source_topics}
        await self._commit_tasks([self.tasks[p] for p in partitions if p in self.tasks])
        for p in partitions:
            task = self.tasks.get(p)
            if task is not None and task.state is not TaskState.RUNNING:
                await self.life.drop(task)

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP]
    ) -> None:
        """Keep producers of tasks we still own, close the others, start new ones."""
        wanted = {
            tp.partition
            for tp in assigned
            if tp.topic in self.source_topics and not self.app.assignor.is_standby(tp)
        }
        self.hooks.rebalance()
        generation: int = self.app.consumer_generation_id
        last, self._generation = self._generation, generation
        self.first_offsets.clear()
        await restart_tasks(self.life, wanted, generation, last)
        await self.hooks.assigned()
        if wanted:
            kept = self.committer.source_offsets_kept
            await assign_start_positions(
                self.broker,
                self.tasks,
                self.source_topics,
                sorted(wanted),
                None if kept is None else kept[1],
                self._end_hanging,
            )
            if kept is not None:
                # Before Faust's recovery reads the stores' offsets: a rebuilt one restores.
                await confirm_stored_offsets(
                    self.broker, self.tasks, kept[0], kept[1], sorted(wanted), self.life.rebuild
                )

    async def _end_hanging(self, hanging: list[TopicPartition]) -> None:
        await self.hanging.commit_through(self.tasks, hanging)

    def _written_by(self, partition: int) -> list[TopicPartition]:
        """Every partition the task of ``partition`` may write (app/eos/hanging.py)."""
        s = self.settings
        changelogs = sorted(set(self.committer.changelog_topics()))
        sinks = (s.output_topic, s.dlq_topic, s.repartition_topic)
        return written_by(partition, changelogs, sinks, s.partitions)

    # -- rejoins ------------------------------------------------------------------------------

    def _request_rejoin(self) -> None:
        self.rejoins_requested += 1
        request_rejoin(self.app)

    # -- the loops -----------------------------------------------------------------------------

    @Service.task  # type: ignore[untyped-decorator]
    async def _commit_loop(self) -> None:
        """Commit the tasks with processed records every ``DEDUPE_COMMIT_INTERVAL`` (sooner
        when one holds :attr:`commit_every` records).

        While every task is caught up (its last fetch left nothing at the broker) the interval
        runs from one commit's start to the next's, as Flink's checkpoint interval does
        (``execution.checkpointing.interval``): a record waits at most the interval for its
        commit to start, however long commits take (on three brokers at replication 3 a commit
        can take half an interval). While a task is behind, the interval runs from the commit's
        end, as Kafka Streams counts it (``StreamThread.maybeCommit`` sets ``lastCommitMs``
        once the commit returned) and as Flink's ``min-pause`` between checkpoints guarantees:
        a commit holds its tasks' locks, so starting the next one sooner would only take
        processing time from records that wait at the broker anyway.
        """
        interval = self.settings.commit_interval
        due = time.monotonic() + interval
        while not self.should_stop:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._wakeup.wait(), timeout=max(due - time.monotonic(), 0.0)
                )
            self._wakeup.clear()
            started = time.monotonic()
            tasks = [t for t in self.tasks.values() if t.dirty and t.state is TaskState.RUNNING]
            if tasks:
                await self._commit_tasks(tasks)
            caught_up = all(t.caught_up for t in self.tasks.values())
            due = next_commit_due(started, time.monotonic(), caught_up, interval)

    @Service.task  # type: ignore[untyped-decorator]
    async def _stall_watchdog(self) -> None:
        """Un-stall partitions whose records Faust's consumer fetched but never delivered
        (:class:`~app.eos.guards.StallWatchdog`)."""
        limit = self.settings.stall_timeout
        quiet_since = time.monotonic()
        while not self.should_stop:
            await self.sleep(min(limit / 4, 5.0))
            if records_held_back(self.app):
                quiet_since = time.monotonic()
                continue
            await self.watchdog.check(self.tasks.values(), quiet_since)

    @Service.task  # type: ignore[untyped-decorator]
    async def _replica_watch(self) -> None:
        """Say so when brokers are down below ``min.insync.replicas`` (app/eos/replicas.py)."""
        while not self.should_stop:
            await self.sleep(WATCH_INTERVAL)
            await self.replicas.check()

    def _topics_written(self) -> list[str]:
        s = self.settings
        changelogs = self.committer.changelog_topics()
        return [*self.source_topics, s.output_topic, s.dlq_topic, *changelogs]

    async def _seek_back(self, tp: TopicPartition, position: int) -> None:
        self.hooks.seeked_back(tp)
        await self._seek(tp, position)

    # -- commits -------------------------------------------------------------------------------

    async def commit_all(self) -> None:
        """Commit every task's open transaction now (used before Faust closes the tables)."""
        await self._commit_tasks([t for t in self.tasks.values() if t.state is TaskState.RUNNING])

    async def on_stop(self) -> None:
        """Commit what was processed, then close the producers (a graceful stop).

        Normally :meth:`commit_all` already ran (``DedupeApp`` calls it once the agents are
        idle, before Faust stops the tables); this catches anything left.
        """
        tasks = list(self.tasks.values())
        await self._commit_tasks([t for t in tasks if t.state is TaskState.RUNNING])
        for task in tasks:
            await self.life.drop(task)
        await self.broker.close()
        await self.replicas.close()

    async def _commit_tasks(self, tasks: Iterable[Task]) -> None:
        await asyncio.gather(*(self.life.commit(t) for t in tasks))


class Transport(AIOKafkaTransport):  # type: ignore[misc]
    """Faust's aiokafka transport with our consumer and transaction manager."""

    Consumer = Consumer
    TransactionManager = TaskTransactionManager
