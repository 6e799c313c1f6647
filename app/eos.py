"""Exactly-once processing on Faust that really holds: one Kafka transaction per partition task.

faust-streaming's own ``exactly_once`` does not hold for a dedup worker (see
``../shared/FAUST-EOS.md``): output is sent outside the transaction, changelog records slip into
the next transaction, the local store keeps writes of aborted transactions and commit errors are
swallowed. This module replaces Faust's ``TransactionManager`` with one that keeps Faust doing
what it does well (the worker CLI, agents, tables, group membership, rebalancing, changelog
recovery, standbys, the web server) and owns the transaction itself.

The unit of work is a *task*: partition number ``p`` of the co-partitioned source topics (the
input topic and the repartition topic; the table's changelog has the same partition count). A
task has one transactional producer, ``transactional.id = "<app id>-<input topic>-<p>"``: stable
across deploys and restarts, so a restarted or new owner of ``p`` fences the old one. Everything
caused by the records of task ``p`` goes into task ``p``'s open transaction:

- output, dead-letter and repartition records (``TaskTransaction.send``; the task builds one
  record batch per target partition and hands it to the producer when full or at the commit);
- the table's changelog records (``TransactionalTable`` stages them; they are sent when the
  batch's processing scope closes, so they are always in the same transaction as the records);
- the consumed offsets (``send_offsets_to_transaction`` at commit).

Local state follows the transaction: table writes are staged in memory per task and applied to
RocksDB (with the changelog offset they correspond to, in one write batch) only after the
transaction committed. An aborted or failed transaction discards them. So RocksDB never holds a
write that did not commit, and after a restart Faust's recovery replays only committed changelog
records (the consumer reads with ``isolation.level=read_committed``).

Records reach the manager in batches of one task's records (``processing_batch``, called by
``Consumer`` through the app's ``batch_handler``, not through Faust's per-record stream).
Commits run every ``DEDUPE_COMMIT_INTERVAL`` for every task with new work. A batch's processing
scope and its task's commit exclude each other (a per-task lock), so a commit never contains half
of a record, and the offsets committed are exactly those of the records whose sends are in it.

Failures are never swallowed:

- fenced (another owner of ``p`` initialised the same transactional id): the task stops at once,
  its staged writes are dropped, and the worker rejoins the group;
- an error before the commit request: the transaction is aborted, staged writes dropped, the
  worker rejoins so the partition is re-read from its committed offset;
- a commit whose outcome is unknown (timeout, lost connection): the producer is closed and
  recreated with the same transactional id (never aborted; ``InitProducerId`` completes or aborts
  the pending transaction on the broker), then the group's committed offsets say whether it
  committed: if so the staged writes are applied, otherwise dropped and the worker rejoins.

Each transaction also carries a changelog record of its source offsets (``SOURCE_OFFSETS_KEY``).
After a rebalance the manager waits until no older transaction is open on each task's
changelog partition (``_wait_until_settled``), and after recovery a task starts at the later of
the group's committed offset and its store's record (``_on_recovered``): a broker that reads
back a stale committed offset cannot make a task re-read what it already committed.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import (
    IllegalOperation,
    InvalidProducerEpoch,
    KafkaConnectionError,
    KafkaError,
    ProducerFenced,
    TransactionalIdAuthorizationFailed,
)
from aiokafka.structs import ConsumerRecord, RecordMetadata, TopicPartition
from faust.transport.consumer import CONSUMER_FETCHING, TransactionManager
from faust.transport.drivers.aiokafka import AIOKafkaConsumerThread
from faust.transport.drivers.aiokafka import Consumer as FaustKafkaConsumer
from faust.transport.drivers.aiokafka import Transport as AIOKafkaTransport
from faust.types import TP
from mode import Service

from app import faults
from app.metrics import COMMIT_SECONDS
from tables.store import SOURCE_OFFSETS_KEY, encode_source_offsets

if TYPE_CHECKING:
    from app.settings import Settings

log = logging.getLogger(__name__)

FENCING_ERRORS = (ProducerFenced, InvalidProducerEpoch, TransactionalIdAuthorizationFailed)


#: Records per partition go to the broker in batches of up to this size, built by the task
#: (``append_record``); a commit interval's records fit in a few.
MAX_BATCH_BYTES = 1024 * 1024


async def send_lingering(producer: AIOKafkaProducer) -> None:
    """Send every batch the producer holds now, without waiting for its linger, and wait until
    the broker acknowledged them (aiokafka does this itself inside ``commit_transaction``;
    the manager needs the acknowledged offsets before it asks to commit)."""
    await producer._message_accumulator.flush_for_commit()


#: A batch handed to the producer: its delivery future (the batch's base offset) and the index
#: of its last record, so ``base + last`` is the last record's offset.
Sent = tuple["asyncio.Future[RecordMetadata]", int]


async def append_record(
    task: Task,
    tp: TopicPartition,
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> None:
    """Add a record to the task's open batch for ``tp``; a full batch goes to the producer.

    ``producer.send`` costs a future, a metadata check and an accumulator round per record
    (in a profile, half of the agent's time); a batch built here costs one append per record
    and one ``send_batch`` per partition per commit (:meth:`Task.send_batches`). Keys and
    values are bytes already. Nothing reaches the producer before its batch is sent, so a
    transaction that aborts never sent the open batches at all.
    """
    if append_now(task, tp, key, value, timestamp_ms, headers):
        return
    await task.send_batch(tp)  # full
    assert task.producer is not None
    builder = task.builders[tp] = task.producer.create_batch()
    # An empty batch takes any record (the broker judges its size).
    builder.append(timestamp=timestamp_ms, key=key, value=value, headers=headers or [])


def append_now(
    task: Task,
    tp: TopicPartition,
    key: bytes | None,
    value: bytes | None,
    timestamp_ms: int | None = None,
    headers: list[tuple[str, bytes]] | None = None,
) -> bool:
    """:func:`append_record` without a coroutine: False (nothing added) when the open batch
    for ``tp`` is full and must be sent first."""
    builder = task.builders.get(tp)
    if builder is None:
        assert task.producer is not None
        builder = task.builders[tp] = task.producer.create_batch()
    return (
        builder.append(timestamp=timestamp_ms, key=key, value=value, headers=headers or [])
        is not None
    )


def abandon(waiter: asyncio.Future[None] | None) -> None:
    """Stop waiting for a commit whose answer we no longer wait for (timed out, or the task
    stopped). Its request stays out (``commit_transaction`` shields it) and the outcome is
    settled otherwise; left pending, the waiter would be destroyed with its producer
    ("Task was destroyed but it is pending", seen in F8 after an unknown outcome)."""
    if waiter is not None and not waiter.done():
        waiter.cancel()


def is_fenced(producer: AIOKafkaProducer | None, exc: BaseException) -> bool:
    """True when ``exc`` (or the error that broke ``producer``) says another owner took over.

    aiokafka reports fencing on the request that met it; later calls on the same producer fail
    with ``IllegalOperation``, so the producer's own fatal error is checked too.
    """
    if isinstance(exc, FENCING_ERRORS):
        return True
    txn = getattr(producer, "_txn_manager", None)
    if txn is None or not txn.is_fatal_error():
        return False
    waiter = txn.wait_for_transaction_end()
    return bool(
        waiter.done() and not waiter.cancelled() and isinstance(waiter.exception(), FENCING_ERRORS)
    )


async def delivered(task: Task) -> None:
    """Raise the first send error of the open transaction, once every send is answered
    (after ``send_lingering`` every one normally is)."""
    futures = [f for f, _ in (*task.pending, *task.changelog_pending)]
    unanswered = [f for f in futures if not f.done()]
    if unanswered:
        await asyncio.gather(*unanswered)
    for f in futures:
        exc = f.exception()
        if exc is not None:
            raise exc


def retrieve_exception_later(fut: asyncio.Future[Any]) -> None:
    """Mark ``fut``'s outcome as seen: a given-up send or abort must not log "exception was
    never retrieved" (at ERROR) when it fails after we stopped waiting for it."""
    fut.add_done_callback(lambda f: None if f.cancelled() else f.exception())


async def force_close(producer: AIOKafkaProducer) -> None:
    """Close ``producer`` after its ``stop()`` was cut short (it waits for the broker to take
    what it holds, and a paused broker never does): stop its sender and close its connections,
    so no producer of a given-up transaction lives on, sends once the broker is back, and then
    fails futures nobody awaits (aiokafka internals; every producer we drop is fenced anyway).
    """
    try:
        await producer._sender.close()
        # stop() waits for the batches still held to be sent: fail them (quietly) so it ends.
        acc = producer._message_accumulator
        for batch in (*(b for bs in acc._batches.values() for b in bs), *acc._pending_batches):
            for fut in (batch.future, batch._drain_waiter, *(f for f, _ in batch._msg_futures)):
                retrieve_exception_later(fut)
        acc.fail_all(KafkaConnectionError("the transactional producer was dropped"))
        await producer.client.close()
    except Exception as exc:  # closing what is already broken: nothing more to do
        log.warning("dropping a transactional producer: %r", exc)


def is_transaction_error(producer: AIOKafkaProducer | None, exc: BaseException) -> bool:
    """True when ``exc`` is the transaction's failure (Kafka's, or the producer refusing to send
    once it was fenced: aiokafka's ``IllegalOperation`` is no ``KafkaError``), not a bug."""
    return isinstance(exc, KafkaError | IllegalOperation) or is_fenced(producer, exc)


class TaskState(enum.Enum):
    """Life of a partition task between two rebalances."""

    RUNNING = "running"
    #: Another owner initialised our transactional id: this worker must not touch ``p``.
    FENCED = "fenced"
    #: A transaction failed; ``p`` must be re-read from its committed offset after a rejoin.
    FAILED = "failed"


class StagedState(Protocol):
    """A store whose writes for a partition wait for that partition's transaction."""

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        """Apply the staged writes of ``partition`` (the transaction committed); the offset is
        that of the transaction's last changelog record (None: it wrote no changelog record)."""

    def discard_partition(self, partition: int) -> None:
        """Drop the staged writes of ``partition`` (the transaction did not commit)."""


class SourceOffsetStore(Protocol):
    """A store that keeps each transaction's source offsets (see ``keep_source_offsets``)."""

    def stage_source_offsets(self, partition: int, value: bytes) -> None: ...

    def source_offsets(self, partition: int) -> dict[str, int]: ...


#: A changelog record staged by a table write, sent when the record's scope closes:
#: (changelog topic, key, value; None is a tombstone). A plain tuple: one is staged per
#: forwarded record.
StagedRecord = tuple[str, bytes, "bytes | None"]


@dataclass
class Task:
    """The transactional state of one partition number ``p`` of the source topics."""

    partition: int
    transactional_id: str
    producer: AIOKafkaProducer | None = None
    state: TaskState = TaskState.RUNNING
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    in_transaction: bool = False
    #: Batches of the open transaction the producer has (output, dead-letter, repartition).
    pending: list[Sent] = field(default_factory=list)
    #: Batches and single sends of changelog records of the open transaction.
    changelog_pending: list[Sent] = field(default_factory=list)
    #: Batches of the open transaction being built, per target partition (``append_record``).
    builders: dict[TopicPartition, Any] = field(default_factory=dict)
    #: The changelog partitions among them.
    changelog_tps: set[TopicPartition] = field(default_factory=set)
    #: Changelog records staged by the record being processed.
    outbox: list[StagedRecord] = field(default_factory=list)
    #: Next offset to commit, per source partition, for records in the open transaction.
    offsets: dict[TopicPartition, int] = field(default_factory=dict)
    records: int = 0
    #: Next offset to read, per source partition: the last processed record's offset + 1.
    positions: dict[TopicPartition, int] = field(default_factory=dict)
    #: When the consumer last delivered a record of each source partition (monotonic time).
    delivered_at: dict[TopicPartition, float] = field(default_factory=dict)
    #: Source partitions sought back by the stall watchdog since their last delivery.
    stall_seeks: set[TopicPartition] = field(default_factory=set)
    # figures for status and metrics
    #: Batches the consumer handed over for this task (``processing_batch``) that completed.
    batches: int = 0
    commits: int = 0
    committed_records: int = 0
    last_commit_at: float | None = None
    last_commit_seconds: float | None = None

    @property
    def dirty(self) -> bool:
        """True when the open transaction holds processed records."""
        return bool(self.offsets)

    async def send_batch(self, tp: TopicPartition) -> None:
        """Hand the open batch for ``tp`` to the producer (it joins the open transaction)."""
        builder = self.builders.pop(tp)
        builder.close()  # complete: ``producer.send`` must not add to it
        assert self.producer is not None
        fut = await self.producer.send_batch(builder, tp.topic, partition=tp.partition)
        sent = self.changelog_pending if tp in self.changelog_tps else self.pending
        sent.append((fut, builder.record_count() - 1))

    async def send_batches(self) -> None:
        """Hand every open batch to the producer (before the commit)."""
        for tp in list(self.builders):
            await self.send_batch(tp)

    def reset_transaction(self) -> None:
        # Sends of a transaction given up fail later (aborted, fenced); nobody awaits them.
        for fut, _ in (*self.pending, *self.changelog_pending):
            retrieve_exception_later(fut)
        self.in_transaction = False
        self.builders.clear()
        self.pending.clear()
        self.changelog_pending.clear()
        self.outbox.clear()
        self.offsets.clear()
        self.records = 0


class TaskTransaction:
    """What the dedup loop may do while processing a task's records: send, inside the task's
    transaction (exactly-once; :class:`TaskBatch`) or through the plain producer
    (at-least-once, ``app.alo``)."""

    __slots__ = ("_task",)

    def __init__(self, task: Task) -> None:
        self._task = task

    @property
    def partition(self) -> int:
        return self._task.partition

    async def send(
        self,
        topic: str,
        *,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes]] | None,
        timestamp_ms: int | None,
        partition: int | None,
    ) -> None:
        """Send one record in this task's open transaction; it becomes visible only on commit.

        It runs for every forwarded record: the open batch is found by a plain ``(topic,
        partition)`` tuple (equal to, and hashed as, the ``TopicPartition`` it is kept under),
        so a ``TopicPartition`` is built only when a batch is opened."""
        if partition is None:
            raise ValueError("a task transaction sends to explicit partitions only")
        task = self._task
        listed = list(headers) if headers else None  # aiokafka's builder takes a list only
        builder = task.builders.get((topic, partition))
        if (
            builder is not None
            and builder.append(timestamp=timestamp_ms, key=key, value=value, headers=listed)
            is not None
        ):
            return
        tp = TopicPartition(topic, partition)
        if not append_now(task, tp, key, value, timestamp_ms, listed):
            await append_record(task, tp, key, value, timestamp_ms, listed)


#: The partition whose records the current batch scope processes (tables read it: see
#: ``tables.transactional.current_partition``).
batch_partition: ContextVar[int | None] = ContextVar("dedupe_batch_partition", default=None)

#: A gap check polls the broker this often (seconds) until the position passes the gap.
GAP_POLL = 0.05

#: A batch gives the event loop a turn after this many records.
YIELD_EVERY = 256


#: A fetched record of a source topic, as the batch path reads it: aiokafka's own record
#: (``timestamp`` in ms, -1 when it has none; ``headers`` a tuple), handed over as fetched.
#: Faust's ``Message`` copies about twenty attributes per record (its consumer's ``_to_message``
#: took 8% of the worker's samples in a profile at 2M events), and a copy of our own still
#: took 5%.
SourceRecord: TypeAlias = "ConsumerRecord[bytes, bytes]"


#: What the consumer hands records of the source topics to: one partition's records, in offset
#: order, as fetched, and the consumer generation they were fetched in (see :class:`Consumer`).
BatchHandler = Callable[[list[SourceRecord], int], Awaitable[None]]


class TaskBatch(TaskTransaction):
    """What the agent may do while processing a batch of one task's records."""

    __slots__ = ("_generation_id", "_manager", "_messages")

    def __init__(
        self,
        manager: TaskTransactionManager,
        task: Task,
        messages: list[SourceRecord],
        generation_id: int,
    ) -> None:
        super().__init__(task)
        self._manager = manager
        self._messages = messages
        self._generation_id = generation_id

    async def records(self) -> AsyncIterator[SourceRecord]:
        """The batch's records to process, in offset order; a record counts as processed (its
        offset joins the transaction) once the loop body that got it finished.

        Skipped, as Faust's stream skips them: records of an older consumer generation or while
        the flow is stopped (a rebalance began); and records out of sequence
        (a record delivered again, or one after a gap that holds records:
        :meth:`TaskTransactionManager._gap_checked`). The rest of the batch is dropped when the
        task stops (fenced, failed): its records are re-read from the committed offset. Nothing
        skipped is committed.

        The checks and the offset bookkeeping are written out here, for the batch's one
        partition, without a call per record: they run for every record.
        """
        manager, task = self._manager, self._task
        app = manager.app
        flow_active = app.flow_control.is_active
        generation_id = self._generation_id
        faults = manager.faults
        first = self._messages[0]
        tp = TopicPartition(first.topic, first.partition)
        positions, offsets = task.positions, task.offsets
        logged_first = tp in manager.first_offsets
        seen = False
        for n, message in enumerate(self._messages, 1):
            if n % YIELD_EVERY == 0:
                await asyncio.sleep(0)  # let the web server and timers run in a long batch
            if (
                task.state is not TaskState.RUNNING
                or not flow_active()
                or app.consumer_generation_id != generation_id
            ):
                return
            offset = message.offset
            if manager._skipping and offset < manager._skipping.get(tp, -1):
                continue  # fault injection: as if the consumer had never delivered it
            if not seen:  # delivered: what the stall watchdog watches
                seen = True
                task.delivered_at[tp] = time.monotonic()
                task.stall_seeks.discard(tp)
            expected = positions.get(tp)
            if expected is not None and offset != expected:
                if offset < expected:
                    continue  # delivered again: already processed in this or a committed txn
                if not await manager._gap_checked(task, message):
                    continue
            yield message
            offsets[tp] = positions[tp] = offset + 1
            task.records += 1
            if not logged_first:
                logged_first = True
                manager.first_offsets.setdefault(tp, offset)
                log.info("%s-%d: first record processed at offset %d", *tp, offset)
            if faults is not None:
                await manager._fault_after_processed(message)


class _BatchScope:
    """``async with tm.processing_batch(messages) as batch``: a batch of one task's records in
    its transaction, with one lock hold, one transaction check and one changelog flush.

    Yields ``None`` when this worker does not own the task (revoked, fenced or failed).
    """

    __slots__ = ("_generation_id", "_manager", "_messages", "_task", "_token")

    def __init__(
        self, manager: TaskTransactionManager, messages: list[SourceRecord], generation_id: int
    ) -> None:
        self._manager = manager
        self._messages = messages
        self._generation_id = generation_id
        self._task: Task | None = None
        self._token: Any = None

    async def __aenter__(self) -> TaskBatch | None:
        task = self._manager.tasks.get(self._messages[0].partition)
        if task is None or task.state is not TaskState.RUNNING:
            return None
        await task.lock.acquire()
        if task.state is not TaskState.RUNNING or task.producer is None:
            task.lock.release()
            return None
        try:
            if not task.in_transaction:
                await task.producer.begin_transaction()
                task.in_transaction = True
        except Exception as exc:
            # The producer's state, never the batch's (aiokafka asserts when it is fenced).
            task.lock.release()
            self._manager._transaction_error(task, exc, "beginning a transaction")
            return None
        except BaseException:
            task.lock.release()
            raise
        self._task = task
        self._token = batch_partition.set(task.partition)
        return TaskBatch(self._manager, task, self._messages, self._generation_id)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        task = self._task
        if task is None:
            return False
        manager = self._manager
        try:
            if exc is None:
                await manager._flush_outbox(task)
        except (KafkaError, IllegalOperation) as flush_exc:
            exc = flush_exc
        finally:
            batch_partition.reset(self._token)
            task.lock.release()
        if exc is not None:
            # Part of the batch is in the transaction: it must never commit. A transaction's
            # error stops the task (the partition is re-read), the worker goes on; anything
            # else is a bug and stops the worker.
            manager._transaction_error(task, exc, "while processing")
            return is_transaction_error(task.producer, exc)
        task.batches += 1
        if task.records >= manager.commit_every:
            manager.commit_soon()
        return False


class TaskTransactionManager(TransactionManager):  # type: ignore[misc]
    """Faust's transaction manager, replaced: one transaction per partition task.

    Faust creates it through :class:`Transport` and calls it on rebalances; the batch handler
    opens a scope per batch of one task's records with :meth:`processing_batch`; tables stage
    changelog records with
    :meth:`stage_changelog`; a background loop commits every ``commit_interval``.
    """

    #: Commit a task early once its open transaction holds this many records.
    commit_every = 10_000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tasks: dict[int, Task] = {}
        self.stores: list[StagedState] = []
        self._wakeup = asyncio.Event()
        self._admin: AIOKafkaAdminClient | None = None
        self._gap_reader: AIOKafkaConsumer | None = None
        #: The gap reader is shared by the agent and the stall watchdog: one user at a time.
        self._gap_lock = asyncio.Lock()
        self.rejoins_requested = 0
        #: Partitions un-stalled by the watchdog (see ``_stall_watchdog``).
        self.stalls = 0
        #: Fault injection ``skip-fetched``: records below these offsets are not delivered.
        self._skipping: dict[TopicPartition, int] = {}
        self._offsets_kept: tuple[SourceOffsetStore, str] | None = None
        self.app.on_rebalance_complete.connect(self._rebalance_complete)
        #: First offset processed per source partition since the last rebalance (for the log).
        self.first_offsets: dict[TopicPartition, int] = {}
        self.faults = faults.parse(self.app.dedupe_settings.fault_injection)

    # -- configuration -------------------------------------------------------------------------

    @property
    def settings(self) -> Settings:
        settings: Settings = self.app.dedupe_settings
        return settings

    @property
    def group_id(self) -> str:
        group: str = self.app.conf.id
        return group

    @property
    def source_topics(self) -> frozenset[str]:
        s = self.settings
        return frozenset({s.input_topic, s.repartition_topic})

    def transactional_id(self, partition: int) -> str:
        """Stable per (app, input topic, partition): survives deploys and topology changes."""
        return f"{self.settings.app_id}-{self.settings.input_topic}-{partition}"

    def register_store(self, store: StagedState) -> None:
        """A store whose staged writes follow this manager's transactions."""
        self.stores.append(store)

    def keep_source_offsets(self, store: SourceOffsetStore, changelog_topic: str) -> None:
        """Every transaction also writes its source offsets to ``changelog_topic`` (key
        :data:`~tables.store.SOURCE_OFFSETS_KEY`), and ``store`` keeps them: see
        :meth:`_on_recovered`. One table per worker does this."""
        if self._offsets_kept is not None:
            raise RuntimeError("source offsets are already kept by another table")
        self._offsets_kept = (store, changelog_topic)

    # -- the agent's side ----------------------------------------------------------------------

    def processing_batch(self, messages: list[SourceRecord], generation_id: int) -> _BatchScope:
        """Scope for processing ``messages`` (records of one partition, in offset order, fetched
        in consumer generation ``generation_id``):
        ``async with tm.processing_batch(msgs, gen) as batch: async for m in batch.records():``."""
        return _BatchScope(self, messages, generation_id)

    def stage_changelog(self, partition: int, topic: str, key: bytes, value: bytes | None) -> None:
        """Called by a table write: the changelog record joins task ``partition``'s transaction."""
        task = self.tasks.get(partition)
        if task is None or not task.lock.locked():
            raise RuntimeError(
                f"table write for partition {partition} outside of a processing scope: "
                "tables may only change while a record of that partition is processed"
            )
        kept = self._offsets_kept
        if kept is not None and topic != kept[1]:
            # A commit applies one changelog offset to the stores (``commit_partition``); with a
            # second table it would have to be kept per changelog topic.
            raise RuntimeError(
                f"a second transactional table ({topic}) is not supported: this manager "
                f"tracks the changelog offset of one table ({kept[1]})"
            )
        task.outbox.append((topic, key, value))

    async def _flush_outbox(self, task: Task) -> None:
        tp: TopicPartition | None = None
        for topic, key, value in task.outbox:
            if tp is None or tp.topic != topic:
                tp = TopicPartition(topic, task.partition)
                task.changelog_tps.add(tp)
            if not append_now(task, tp, key, value):
                await append_record(task, tp, key, value)
        task.outbox.clear()

    async def _fault_after_processed(self, message: SourceRecord) -> None:
        assert self.faults is not None
        if self.faults.reach("processed") == "skip-fetched":
            await self._skip_fetched(TopicPartition(message.topic, message.partition))

    def commit_soon(self) -> None:
        self._wakeup.set()

    async def _gap_checked(self, task: Task, message: SourceRecord) -> bool:
        """A record above the expected offset: the broker says whether the gap holds records.

        Faust's consumer does not deliver every partition gap-free: around recovery and seeks
        it drops records it believes it already delivered ("DROPPED MESSAGE ROFF") and streams
        skip records of another generation, and the records after them still arrive. Committing
        after such a skip would lose the skipped record. So each task knows the next offset of
        each source partition (from the committed offset at assignment, then from each record;
        :meth:`TaskBatch.records` checks every record against it): a record below it was
        delivered again and is skipped; a record above it leaves a gap, which the broker is
        asked about here (read_committed): commit markers and aborted records are fine (True),
        a real record means the partition is re-read from its committed offset (False).
        """
        tp = TopicPartition(message.topic, message.partition)
        expected = task.positions[tp]
        try:
            missed = await self.first_committed_record(tp, expected, message.offset)
        except (KafkaError, TimeoutError, OSError) as exc:
            self._fail(
                task,
                f"could not learn what lies between offsets {expected} and {message.offset} "
                f"of {tp.topic}-{tp.partition} (the broker did not answer: {exc!r})",
            )
            return False
        if missed is None:
            return True
        self._fail(
            task,
            f"the consumer skipped record {missed} of {tp.topic}-{tp.partition} "
            f"(expected offset {expected}, got {message.offset})",
        )
        return False

    async def _started_gap_reader(self) -> AIOKafkaConsumer:
        """The read_committed reader that looks at gaps (call with ``_gap_lock`` held)."""
        if self._gap_reader is None:
            reader = AIOKafkaConsumer(
                bootstrap_servers=self.settings.bootstrap_servers,
                isolation_level="read_committed",
                enable_auto_commit=False,
                fetch_max_wait_ms=10,
            )
            await reader.start()
            await asyncio.sleep(0)  # aiokafka 0.14: let its background task start
            self._gap_reader = reader
        return self._gap_reader

    async def first_committed_record(self, tp: TP, start: int, end: int) -> int | None:
        """Offset of the first record a read_committed reader sees in [start, end), if any: a
        gap in a source partition, or a changelog's end at its recovery (a partition of
        another topic is given up afterwards, so the reader does not go on fetching it)."""
        tp = TopicPartition(tp.topic, tp.partition)
        async with self._gap_lock:
            reader = await self._started_gap_reader()
            try:
                return await self._first_record(reader, tp, start, end)
            finally:
                if tp.topic not in self.source_topics and tp in reader.assignment():
                    reader.assign(sorted(reader.assignment() - {tp}))

    async def _first_record_from(self, tp: TopicPartition, start: int) -> int | None:
        """Offset of the first committed record at or after ``start``, if any (for the
        stall watchdog: up to the partition's last stable offset)."""
        async with self._gap_lock:
            reader = await self._started_gap_reader()
            stable: int = (await reader.end_offsets([tp]))[tp]
            if stable <= start:
                return None
            return await self._first_record(reader, tp, start, stable)

    async def _first_record(
        self, reader: AIOKafkaConsumer, tp: TopicPartition, start: int, end: int
    ) -> int | None:
        # Gaps are frequent on transactional source topics (a commit marker after each of the
        # writers' commits), so keep every source partition assigned and only seek: an
        # assignment change would reset the reader and cost a round trip of its own.
        if tp not in reader.assignment():
            wanted = {TopicPartition(t, p) for t in self.source_topics for p in self.tasks}
            reader.assign(sorted(wanted | {tp}))
        reader.seek(tp, start)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.settings.commit_timeout
        while await reader.position(tp) < end:
            left = deadline - loop.time()
            if left <= 0:
                # Nothing below ``end`` came back in time. The gap is before a record already
                # delivered (or below the last stable offset), so no transaction is open in it:
                # the broker did not answer (paused, overloaded), and the gap is unknown.
                raise TimeoutError(
                    f"no answer for {tp.topic}-{tp.partition} offsets [{start}, {end}) "
                    f"within {self.settings.commit_timeout:g}s"
                )
            # Short polls: a range of control records only (commit markers, aborted batches)
            # moves the position without returning a record, and ``getmany`` would wait for
            # records until its timeout.
            batch = await reader.getmany(tp, timeout_ms=max(1, round(min(left, GAP_POLL) * 1000)))
            for record in batch.get(tp, []):
                if record.offset < end:
                    found: int = record.offset
                    return found
        return None

    async def _skip_fetched(self, tp: TopicPartition) -> None:
        """Fault injection (``processed=skip-fetched@n``): move the consumer of ``tp`` to its
        end, and drop the records in between that it already fetched, as if it had never
        delivered them (until the stall watchdog seeks back)."""
        async with self._gap_lock:
            reader = await self._started_gap_reader()
            end: int = (await reader.end_offsets([tp]))[tp]
        self._skipping[tp] = end
        log.warning(
            "fault injection: the consumer skips %s-%d to offset %d", tp.topic, tp.partition, end
        )
        await self.app.consumer.seek_wait({tp: end})

    # -- Faust's side: rebalances and the commit calls we take over ----------------------------

    async def _rebalance_complete(self, sender: Any, **kwargs: Any) -> None:
        await self._on_recovered()

    async def on_partitions_revoked(self, revoked: set[TP]) -> None:
        """Faust calls this after the agents finished their current records: commit them."""
        partitions = {tp.partition for tp in revoked if tp.topic in self.source_topics}
        await self._commit_tasks([self.tasks[p] for p in partitions if p in self.tasks])
        for p in partitions:
            task = self.tasks.get(p)
            if task is not None and task.state is not TaskState.RUNNING:
                await self._drop_task(task)

    async def on_rebalance(
        self, assigned: set[TP], revoked: set[TP], newly_assigned: set[TP]
    ) -> None:
        """Keep producers of tasks we still own, close the others, start new ones."""
        wanted = {
            tp.partition
            for tp in assigned
            if tp.topic in self.source_topics and not self.app.assignor.is_standby(tp)
        }
        if self.faults is not None:
            self.faults.reach("rebalance")
        for p in sorted(set(self.tasks) - wanted):
            await self._drop_task(self.tasks[p])
        self.first_offsets.clear()
        to_start = [p for p in sorted(wanted) if p not in self.tasks]
        if to_start:
            log.info("starting transactional producers for partitions %s", to_start)
            started = time.monotonic()
            await asyncio.gather(*(self._start_task(p) for p in to_start))
            log.info(
                "transactional producers ready for %d partitions in %.2fs",
                len(to_start),
                time.monotonic() - started,
            )
        if self.faults is not None and self.faults.reach("assigned") == "term":
            await asyncio.sleep(1.0)  # fault injection: the stop runs meanwhile
        if wanted:
            # Faust seeks every assigned partition to its committed offset after a rebalance:
            # that is where each task's next record must be.
            await self._wait_until_settled(sorted(wanted))
            tps = [TopicPartition(t, p) for t in sorted(self.source_topics) for p in sorted(wanted)]
            committed = await self._committed_offsets_retrying(tps)
            starts = await self._start_offsets(tps, committed)
            now = time.monotonic()
            for p in wanted:
                task = self.tasks.get(p)
                if task is None:
                    continue  # the worker stopped meanwhile (on_stop dropped every task)
                task.positions = {tp: off for tp, off in starts.items() if tp.partition == p}
                task.delivered_at = dict.fromkeys(task.positions, now)
                task.stall_seeks.clear()
            log.info(
                "assigned partitions %s; starting at offsets %s",
                sorted(wanted),
                {f"{tp.topic}-{tp.partition}": off for tp, off in sorted(starts.items())},
            )

    async def _wait_until_settled(self, partitions: list[int]) -> None:
        """Wait until no transaction is open on the changelog partitions of ``partitions``.

        Every transaction of task ``p`` writes changelog partition ``p`` (at least its
        source-offsets record), and only task ``p``'s producer writes there. Its producer was
        just initialised, which fences older ones, so an open transaction there is an older
        one the broker has not finished (seen after a single broker's kill -9: its output
        became visible later). Reading committed offsets, or recovering the changelog, before
        it settles would re-read records whose output then commits: duplicates. So wait until
        the last stable offset reaches the end of each changelog partition.
        """
        kept = self._offsets_kept
        if kept is None or not partitions:
            return
        tps = [TopicPartition(kept[1], p) for p in partitions]
        s = self.settings
        # How long an open transaction may stay open while the broker answers: the broker
        # aborts a dead producer's transaction after the transaction timeout.
        patience = 2 * s.transaction_timeout + 30
        deadline = time.monotonic() + patience
        stable_reader = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers, isolation_level="read_committed"
        )
        end_reader = AIOKafkaConsumer(
            bootstrap_servers=s.bootstrap_servers, isolation_level="read_uncommitted"
        )
        await stable_reader.start()
        await end_reader.start()
        await asyncio.sleep(0)
        try:
            warned = False
            while True:
                try:
                    stable = await stable_reader.end_offsets(tps)
                    ends = await end_reader.end_offsets(tps)
                except (KafkaError, TimeoutError, OSError) as exc:
                    # No answer is no evidence of a hanging transaction: wait for the broker.
                    log.warning("reading end offsets failed (%r); retrying", exc)
                    deadline = time.monotonic() + patience
                    await asyncio.sleep(1)
                    continue
                unsettled = {tp: (stable[tp], ends[tp]) for tp in tps if stable[tp] < ends[tp]}
                if not unsettled:
                    if warned:
                        log.warning("the open transactions settled; going on")
                    return
                described = ", ".join(
                    f"{tp.topic}-{tp.partition} (stable {lso} < end {end})"
                    for tp, (lso, end) in sorted(unsettled.items())
                )
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"a transaction stays open on {described}: the broker neither "
                        "committed nor aborted it (a hanging transaction, e.g. after an unclean "
                        "broker shutdown). Find and abort it with kafka-transactions.sh "
                        "find-hanging / abort, then restart the worker"
                    )
                if not warned:
                    log.warning(
                        "a transaction is still open on %s: waiting for the broker to finish "
                        "it before reading committed offsets",
                        described,
                    )
                    warned = True
                await asyncio.sleep(0.5)
        finally:
            await stable_reader.stop()
            await end_reader.stop()

    async def commit(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        """Faust's periodic commit: a no-op, our own loop commits (see module docstring).

        Returning False keeps Faust from marking table offsets as persisted on its own.
        """
        return False

    async def send(self, *args: Any, **kwargs: Any) -> Awaitable[RecordMetadata]:
        raise RuntimeError(
            "sends outside a task transaction are not allowed in this worker; "
            "use TaskBatch.send inside tm.processing_batch(messages)"
        )

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> RecordMetadata:
        raise RuntimeError("sends outside a task transaction are not allowed in this worker")

    async def flush(self) -> None:
        """Nothing to flush outside of tasks: task sends are awaited at commit."""

    # -- task life -----------------------------------------------------------------------------

    def _new_producer(self, partition: int) -> AIOKafkaProducer:
        s = self.settings
        return AIOKafkaProducer(
            bootstrap_servers=s.bootstrap_servers,
            client_id=f"{self.transactional_id(partition)}-producer",
            transactional_id=self.transactional_id(partition),
            transaction_timeout_ms=int(s.transaction_timeout * 1000),
            enable_idempotence=True,
            acks="all",
            # The task builds its batches (append_record) and hands them over when full or
            # at the commit: nothing to linger for.
            linger_ms=0,
            max_batch_size=MAX_BATCH_BYTES,
            max_request_size=s.dlq_max_message_bytes,
            request_timeout_ms=int(min(s.commit_timeout, 30) * 1000),
        )

    async def _start_producer(self, partition: int) -> AIOKafkaProducer:
        """A started producer for ``partition``, retried until the broker answers.

        ``start()`` sends InitProducerId: it fences any older producer with this transactional
        id and completes or aborts the transaction that one left open, so afterwards the
        partition's offsets and changelog are final. While the cluster is unreachable aiokafka
        fails in several ways (timeouts, connection errors, an assertion during bootstrap);
        none of them is an answer, so try again with a fresh producer.
        """
        delay = 0.2
        while True:
            producer = self._new_producer(partition)
            try:
                await producer.start()
                return producer
            except Exception as exc:
                log.warning(
                    "partition %d: starting transactional producer failed (%r); retrying in %.1fs",
                    partition,
                    exc,
                    delay,
                )
                await self._close_producer(producer)
                if self.should_stop:
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _start_task(self, partition: int) -> None:
        producer = await self._start_producer(partition)
        if self.should_stop:
            # Stopped while the producer started: on_stop has dropped the tasks already.
            await self._close_producer(producer)
            return
        self.tasks[partition] = Task(partition, self.transactional_id(partition), producer)

    async def _drop_task(self, task: Task) -> None:
        """Forget a task: drop its staged writes, close its producer without committing."""
        self.tasks.pop(task.partition, None)
        self._discard_staged(task)
        task.reset_transaction()
        if task.producer is not None:
            await self._close_producer(task.producer)
            task.producer = None

    async def _close_producer(self, producer: AIOKafkaProducer) -> None:
        try:
            await asyncio.wait_for(producer.stop(), timeout=self.settings.commit_timeout)
        except (TimeoutError, KafkaError) as exc:
            log.warning("closing a transactional producer failed (%r): dropping it", exc)
            await force_close(producer)

    def _discard_staged(self, task: Task) -> None:
        for store in self.stores:
            store.discard_partition(task.partition)

    def _fail(self, task: Task, why: str) -> None:
        """The open transaction of ``task`` must not commit: drop it and re-read ``p``."""
        if task.state is TaskState.RUNNING:
            log.error("partition %d: %s; aborting and re-reading it", task.partition, why)
            task.state = TaskState.FAILED
        self._discard_staged(task)
        self._request_rejoin()

    def _transaction_error(self, task: Task, exc: BaseException, where: str) -> bool:
        """Stop ``task`` after a failed transaction; True when it may still abort (not fenced)."""
        if is_fenced(task.producer, exc):
            self._fenced(task, exc)
            return False
        self._fail(task, f"transaction failed {where}: {exc!r}")
        return True

    def _fenced(self, task: Task, exc: BaseException) -> None:
        log.error(
            "partition %d: transactional id %s was fenced (%r): another worker owns it; "
            "stopping work on it and rejoining the group",
            task.partition,
            task.transactional_id,
            exc,
        )
        task.state = TaskState.FENCED
        self._discard_staged(task)
        task.reset_transaction()
        self._request_rejoin()

    def _request_rejoin(self) -> None:
        """Ask the group coordinator for a rebalance, so failed tasks restart from committed
        offsets (our eager rebalance revokes every partition and seeks to committed offsets)."""
        self.rejoins_requested += 1
        try:
            thread = self.app.consumer._thread
            consumer = thread._ensure_consumer()
            thread.thread_loop.call_soon_threadsafe(consumer._coordinator.request_rejoin)
        except Exception as exc:  # pragma: no cover - depends on Faust internals
            log.critical("cannot request a rejoin (%r): stopping the worker", exc)
            self.app._crash(exc)

    # -- commits -------------------------------------------------------------------------------

    @Service.task  # type: ignore[untyped-decorator]
    async def _commit_loop(self) -> None:
        interval = self.settings.commit_interval
        while not self.should_stop:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), timeout=interval)
            self._wakeup.clear()
            tasks = [t for t in self.tasks.values() if t.dirty and t.state is TaskState.RUNNING]
            if tasks:
                await self._commit_tasks(tasks)

    @Service.task  # type: ignore[untyped-decorator]
    async def _stall_watchdog(self) -> None:
        """Un-stall partitions whose records Faust's consumer fetched but never delivered.

        Faust's consumer can drop fetched records on its way to the agent (a flow change or a
        generation change in the middle of a batch, a seek racing a fetch after the broker
        came back) while the underlying consumer's position has moved past them. A later
        record of the same partition reveals the gap (``_in_sequence``), but when none comes
        the partition stalls for good: seen after graceful broker restarts, with every task
        RUNNING and the lag never shrinking. So: when no record of a source partition reached
        the agent for ``DEDUPE_STALL_TIMEOUT`` while no rebalance or recovery runs, and the
        broker holds a committed record at or after the task's position, seek the consumer
        back to that position (records already processed are skipped by ``_in_sequence``);
        if that does not help within the same time, rejoin the group.
        """
        limit = self.settings.stall_timeout
        quiet_since = time.monotonic()
        while not self.should_stop:
            await self.sleep(min(limit / 4, 5.0))
            now = time.monotonic()
            if self._consumer_busy():
                quiet_since = now
                continue
            for task in list(self.tasks.values()):
                for tp, position in list(task.positions.items()):
                    since = max(task.delivered_at.get(tp, quiet_since), quiet_since)
                    if task.state is not TaskState.RUNNING or now - since < limit:
                        continue
                    try:
                        readable = await self._first_record_from(tp, position)
                    except (KafkaError, TimeoutError, OSError) as exc:
                        log.warning("stall check of %s-%d failed (%r)", tp.topic, tp.partition, exc)
                        continue
                    if readable is not None and not self._consumer_busy():
                        await self._unstall(task, tp, position, readable, now - since)
                    task.delivered_at[tp] = time.monotonic()

    def _consumer_busy(self) -> bool:
        """True while records are legitimately held back: a rebalance, recovery, paused flow."""
        app = self.app
        consumer = app.consumer
        return bool(
            getattr(app, "rebalancing", False)
            or getattr(app, "in_recovery", False)
            or not app.tables.recovery.completed.is_set()
            or not consumer.flow_active
        )

    async def _unstall(
        self, task: Task, tp: TopicPartition, position: int, readable: int, idle: float
    ) -> None:
        self.stalls += 1
        if tp not in task.stall_seeks:
            log.warning(
                "%s-%d: no record reached the agent for %.0fs although committed record %d is "
                "on the broker (next to process: %d): the consumer moved past records without "
                "delivering them; seeking it back to %d",
                tp.topic,
                tp.partition,
                idle,
                readable,
                position,
                position,
            )
            task.stall_seeks.add(tp)
            self._skipping.pop(tp, None)
            await self.app.consumer.seek_wait({tp: position})
            return
        log.error(
            "%s-%d: still no record delivered %.0fs after seeking back to %d: rejoining the "
            "group so the partition is assigned and read again",
            tp.topic,
            tp.partition,
            idle,
            position,
        )
        task.stall_seeks.discard(tp)
        self._request_rejoin()

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
            await self._drop_task(task)
        if self._admin is not None:
            await self._admin.close()
        if self._gap_reader is not None:
            await self._gap_reader.stop()

    async def _commit_tasks(self, tasks: Iterable[Task]) -> None:
        await asyncio.gather(*(self._commit_task(t) for t in tasks))

    async def _commit_task(self, task: Task) -> None:
        async with task.lock:
            if task.state is not TaskState.RUNNING:
                return
            if not task.in_transaction:
                return
            producer = task.producer
            assert producer is not None
            if not task.dirty:
                # A transaction was begun but no record finished in it: nothing to keep.
                await self._abort(task)
                return
            started = time.monotonic()
            offsets = dict(task.offsets)
            timeout = self.settings.commit_timeout
            try:
                await asyncio.wait_for(task.send_batches(), timeout)
                await asyncio.wait_for(self._record_source_offsets(task, offsets), timeout)
                await asyncio.wait_for(send_lingering(producer), timeout)
                await asyncio.wait_for(delivered(task), timeout=timeout)
                changelog_offset = max(
                    (f.result().offset + last for f, last in task.changelog_pending), default=None
                )
                await asyncio.wait_for(
                    producer.send_offsets_to_transaction(offsets, self.group_id), timeout=timeout
                )
            except Exception as exc:
                # Nothing was asked to commit yet: aborting is safe and exact.
                if self._transaction_error(task, exc, "before the commit"):
                    await self._abort(task)
                return
            commit: asyncio.Future[None] | None = None
            try:
                fault = self.faults.reach("commit") if self.faults is not None else None
                if fault == "pause":
                    await asyncio.sleep(faults.PAUSE_SECONDS)
                if fault == "lose-request":
                    raise TimeoutError("fault injection: commit request lost")
                commit = asyncio.ensure_future(producer.commit_transaction())
                if fault == "lose-response":
                    await asyncio.sleep(0.5)  # the request is out and answered meanwhile
                    raise TimeoutError("fault injection: commit response lost")
                await asyncio.wait_for(asyncio.shield(commit), timeout)
            except asyncio.CancelledError:
                # Stopped while the commit request is out: its outcome is unknown here. Apply
                # nothing and commit nothing more on this task; the store keeps its older
                # changelog offset, so recovery replays the transaction if it did commit.
                abandon(commit)
                task.state = TaskState.FAILED
                self._discard_staged(task)
                raise
            except (TimeoutError, KafkaError, OSError) as exc:
                abandon(commit)
                if is_fenced(producer, exc):
                    self._fenced(task, exc)
                    return
                committed = await self._resolve_unknown_outcome(task, offsets, exc)
                if not committed:
                    return
            self._applied(task, changelog_offset, started)

    async def _record_source_offsets(
        self, task: Task, offsets: Mapping[TopicPartition, int]
    ) -> None:
        """Send a changelog record with this transaction's source offsets in the transaction
        (awaited with the other changelog sends) and stage it in the store."""
        kept = self._offsets_kept
        if kept is None:
            return
        store, topic = kept
        # Every source partition of the task, not only those with records in this transaction:
        # the record replaces the previous one (the offsets of the others are unchanged).
        positions = {**task.positions, **offsets}
        value = encode_source_offsets({tp.topic: off for tp, off in positions.items()})
        assert task.producer is not None
        fut = await task.producer.send(
            topic, key=SOURCE_OFFSETS_KEY, value=value, partition=task.partition
        )
        task.changelog_pending.append((fut, 0))
        store.stage_source_offsets(task.partition, value)

    async def _on_recovered(self) -> None:
        """After Faust's recovery (the stores hold the committed changelog), before records
        flow: start each task at the later of the group's committed offset and the source
        offsets its store holds. Both commit in the same transaction, so they only differ when
        the broker returns a stale committed offset (seen after a single broker's kill -9);
        re-reading from there would forward ids a second time."""
        kept = self._offsets_kept
        if kept is None:
            return
        store = kept[0]
        for task in list(self.tasks.values()):
            stored = store.source_offsets(task.partition)
            raised = {
                tp: stored[tp.topic]
                for tp, position in task.positions.items()
                if stored.get(tp.topic, -1) > position
            }
            if raised:
                await self._raise_positions(task, raised)

    async def _raise_positions(self, task: Task, raised: Mapping[TopicPartition, int]) -> None:
        """Start ``task`` at the ``raised`` offsets, and commit them (in a transaction with no
        records) so the group's offsets catch up even when no new record arrives."""
        async with task.lock:
            if task.state is not TaskState.RUNNING or task.producer is None:
                return
            for tp, later in raised.items():
                log.warning(
                    "partition %d: the group's committed offset for %s-%d is %d, but the "
                    "last transaction in the changelog committed up to %d: starting there "
                    "(the broker returned a stale committed offset)",
                    task.partition,
                    tp.topic,
                    tp.partition,
                    task.positions[tp],
                    later,
                )
                task.positions[tp] = later
                task.offsets[tp] = later
            if not task.in_transaction:
                await task.producer.begin_transaction()
                task.in_transaction = True
        self.commit_soon()

    def _applied(self, task: Task, changelog_offset: int | None, started: float) -> None:
        if self.faults is not None:
            self.faults.reach("committed")
        for store in self.stores:
            store.commit_partition(task.partition, changelog_offset)
        task.commits += 1
        task.committed_records += task.records
        task.last_commit_at = time.time()
        task.last_commit_seconds = time.monotonic() - started
        COMMIT_SECONDS.observe(task.last_commit_seconds)
        task.reset_transaction()

    async def _abort(self, task: Task) -> None:
        producer = task.producer
        assert producer is not None
        aborting = asyncio.ensure_future(producer.abort_transaction())
        retrieve_exception_later(aborting)
        try:
            await asyncio.wait_for(asyncio.shield(aborting), self.settings.commit_timeout)
        except Exception as exc:
            if is_fenced(producer, exc):
                self._fenced(task, exc)
                return
            aborting.cancel()  # the producer is dropped: nothing will answer it
            # InitProducerId of a new producer aborts whatever this one left open.
            log.warning("partition %d: abort failed (%r); recreating producer", task.partition, exc)
            await self._close_producer(producer)
            task.producer = await self._start_producer(task.partition)
        self._discard_staged(task)
        task.reset_transaction()

    async def _resolve_unknown_outcome(
        self, task: Task, offsets: Mapping[TopicPartition, int], exc: BaseException
    ) -> bool:
        """The commit request went out but no answer came: never abort, ask the broker."""
        log.warning(
            "partition %d: commit outcome unknown (%r); recreating producer %s",
            task.partition,
            exc,
            task.transactional_id,
        )
        old = task.producer
        assert old is not None
        await self._close_producer(old)
        # Retries until the coordinator answers; the pending transaction is then complete.
        task.producer = await self._start_producer(task.partition)
        committed = await self._committed_offsets_retrying(list(offsets))
        if all(committed.get(tp) == off for tp, off in offsets.items()):
            log.warning("partition %d: the transaction did commit", task.partition)
            return True
        self._fail(task, "the transaction did not commit (outcome was unknown)")
        task.reset_transaction()
        return False

    async def _start_offsets(
        self, tps: list[TopicPartition], committed: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, int]:
        """Committed offset, or the log start for a partition the group never committed."""
        starts = {tp: off for tp, off in committed.items() if off is not None and off >= 0}
        fresh = [tp for tp in tps if tp not in starts]
        if fresh:
            reader = AIOKafkaConsumer(bootstrap_servers=self.settings.bootstrap_servers)
            await reader.start()
            await asyncio.sleep(0)
            try:
                starts.update(await reader.beginning_offsets(fresh))
            finally:
                await reader.stop()
        return starts

    async def _committed_offsets_retrying(
        self, tps: list[TopicPartition]
    ) -> dict[TopicPartition, int]:
        delay = 0.2
        while True:
            try:
                return await self._committed_offsets(tps)
            except Exception as exc:
                log.warning("reading committed offsets failed (%r); retrying", exc)
                if self._admin is not None:
                    with contextlib.suppress(Exception):
                        await self._admin.close()
                    self._admin = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)

    async def _committed_offsets(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        if self._admin is None:
            self._admin = AIOKafkaAdminClient(bootstrap_servers=self.settings.bootstrap_servers)
            await self._admin.start()
        result = await self._admin.list_consumer_group_offsets(self.group_id, partitions=tps)
        return {tp: meta.offset for tp, meta in result.items() if meta is not None}


class ConsumerThread(AIOKafkaConsumerThread):  # type: ignore[misc]
    """Faust's consumer thread, with highwaters that exist before the first fetch.

    Under exactly_once Faust takes a changelog's highwater from ``last_stable_offset``, which
    aiokafka only knows after a fetch response: at recovery start it is None, Faust reads it as
    -1 and crashes with ConsistencyError on any restart with local state. Ask the broker instead
    (ListOffsets with read_committed isolation returns the last stable offset).
    """

    def _create_worker_consumer(self, transport: Any) -> AIOKafkaConsumer:
        """Faust's worker consumer with ``fetch_max_wait_ms`` from ``DEDUPE_FETCH_MAX_WAIT``
        instead of Faust's fixed 1,500 ms.

        aiokafka sends one fetch at a time to a broker and leaves out partitions whose fetched
        records are still buffered. Once the input partitions' records are buffered, the next
        fetch asks for the repartition topic alone, which has nothing new: the broker holds it
        for the whole wait, and the input partitions, drained meanwhile, wait with it. With
        1.5 s a steady 3,000 records/s reached the worker in bursts with 1.3-1.5 s gaps.
        """
        consumer: AIOKafkaConsumer = super()._create_worker_consumer(transport)
        settings: Settings = self.app.dedupe_settings
        consumer._fetch_max_wait_ms = round(settings.fetch_max_wait * 1000)
        return consumer

    async def _highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        offsets: Mapping[TP, int] = await self._ensure_consumer().end_offsets(partitions)
        return offsets


class Consumer(FaustKafkaConsumer):  # type: ignore[misc]
    """Faust's aiokafka consumer, handing records of the source topics over in batches.

    Faust delivers each record on its own: into a channel queue (two tasks and an
    ``asyncio.wait`` per record), through the stream's iteration, acks and sensors, to the
    agent. That machinery took most of the worker's CPU in a profile. When the app has a
    ``batch_handler``, records of the source topics skip it: each partition's records of one
    fetch go to the handler in one call (offset order, one partition per call, partitions one
    after another), taken from the fetcher's result directly (``_deliver``): Faust's
    ``getmany`` makes its flow, generation and highwater checks per record, here they run per
    partition per fetch. Everything else (changelog records during recovery, other topics) takes
    Faust's path. The handler is shielded: a stop that cancels the fetcher lets the batch
    finish (the stop's commit waits for it) instead of failing its transaction half-way.
    """

    def _new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def _drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - a worker loop
        handler: BatchHandler | None = getattr(self.app, "batch_handler", None)
        if handler is None:
            await super()._drain_messages(fetcher)
            return
        consumer_should_stop = self._stopped.is_set
        fetcher_should_stop = fetcher._stopped.is_set
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records, active = await self._wait_next_records(1.0)
                await self.sleep(0)
                if records is not None and not self.should_stop:
                    await self._deliver(records, active, handler)
                unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _deliver(
        self, records: Mapping[TP, list[Any]], active: set[TP] | None, handler: BatchHandler
    ) -> None:
        """One fetch's records: what Faust's ``getmany`` and ``_drain_messages`` do per record
        (round-robin over topics, flow and generation checks, the highwater metric, the
        "DROPPED MESSAGE ROFF" check), done per partition, and the source topics' records
        handed to ``handler`` as one batch per partition."""
        app = self.app
        if not self.flow_active:
            # Faust's getmany (even after an empty fetch): a rebalance began; go back to the
            # committed offsets.
            try:
                await self.perform_seek()
            except Exception as exc:
                self.log.warning(f"exception performing seek when flow not active {exc}")
            return
        generation_id = app.consumer_generation_id
        batch_topics = self.transactions.source_topics
        read_offset = self._read_offset
        to_message = self._to_message
        for tp, fetched in records.items():
            if not fetched:
                continue
            if not self.flow_active or app.consumer_generation_id != generation_id:
                return  # what Faust's getmany does: the rest is fetched again
            if active is not None and tp not in active and tp not in self._buffered_partitions:
                continue
            app.monitor.track_tp_end_offset(tp, self.highwater(tp))
            r_offset = read_offset[tp]
            if tp.topic in batch_topics:
                messages = (
                    fetched
                    if r_offset is None or fetched[0].offset >= r_offset
                    else [record for record in fetched if record.offset >= r_offset]
                )
                if messages:
                    read_offset[tp] = messages[-1].offset
                    await asyncio.shield(handler(messages, generation_id))
                continue
            if self._held(tp, fetched):
                continue
            for record in fetched:
                if r_offset is not None and record.offset < r_offset:
                    continue
                await self.wait_first(
                    self.callback(to_message(tp, record)), self.suspend_flow.wait()
                )
                read_offset[tp] = record.offset

    _hold: faults.Hold | None = None

    def _held(self, tp: TP, fetched: list[Any]) -> bool:
        """Fault injection ``recovering=hold``: changelog records fetched from the first one
        while state is being recovered reach the recovery only ``HOLD_SECONDS`` later, in
        order (the consumer's position is past them meanwhile). False in production."""
        hold = self._hold
        if hold is None:
            plan: faults.FaultPlan | None = getattr(self.transactions, "faults", None)
            if plan is None or not self.app.tables.recovery.in_recovery:
                return False
            if plan.reach("recovering") != "hold":
                return False
            hold = self._hold = faults.Hold(faults.HOLD_SECONDS)
            hold.release = asyncio.ensure_future(self._release_held(hold))
        if hold.done:
            return False
        hold.messages.extend(self._to_message(tp, record) for record in fetched)
        self._read_offset[tp] = fetched[-1].offset
        return True

    async def _release_held(self, hold: faults.Hold) -> None:
        await asyncio.sleep(hold.seconds)
        log.warning("fault injection: releasing %d held changelog records", len(hold.messages))
        released = 0
        while released < len(hold.messages):  # records held meanwhile go in order, after
            await self.callback(hold.messages[released])
            released += 1
        hold.done = True


class Transport(AIOKafkaTransport):  # type: ignore[misc]
    """Faust's aiokafka transport with our consumer and transaction manager."""

    Consumer = Consumer
    TransactionManager = TaskTransactionManager
