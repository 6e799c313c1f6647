"""A task's life and what a commit's outcome means for it and for the state that follows the
transactions: started with its producer, committed (the stores apply the staged writes),
aborted or failed (they drop them; a failed partition is re-read after a rejoin), fenced (the
task stops), dropped (its producer closes without committing).

The manager owns one :class:`TaskLife` and calls it; nothing here knows Faust."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping

from app.eos.commit import CommitResult, Committer, Outcome
from app.eos.hooks import ManagerHooks
from app.eos.metrics import COMMIT_SECONDS
from app.eos.producer import TransactionalProducers, is_fenced
from app.eos.task import Task, TaskState
from tables.protocol import ChangelogSource, StagedState

log = logging.getLogger(__name__)


class TaskLife:
    """The tasks of this worker (``tasks``, by partition) and the stores that follow them."""

    def __init__(
        self,
        producers: TransactionalProducers,
        committer: Committer,
        hooks: ManagerHooks,
        request_rejoin: Callable[[], None],
        stopping: Callable[[], bool],
    ) -> None:
        self.tasks: dict[int, Task] = {}
        #: State that follows the transactions, with its changelog topic (None: local only).
        self.stores: list[tuple[StagedState, str | None]] = []
        self._producers = producers
        self._committer = committer
        self._hooks = hooks
        self._request_rejoin = request_rejoin
        self._stopping = stopping

    def register_store(self, store: StagedState, changelog_topic: str | None = None) -> None:
        """State whose staged changes follow the transactions: applied when a transaction
        commits, dropped otherwise. With ``changelog_topic``, ``store`` is a
        :class:`~tables.protocol.ChangelogSource`: the commit pulls its staged writes and sends
        them to that topic's partition of the task."""
        self.stores.append((store, changelog_topic))
        if changelog_topic is not None:
            source: ChangelogSource = store  # type: ignore[assignment]
            self._committer.add_changelog(source, changelog_topic)

    async def start(self, partition: int) -> None:
        producer = await self._producers.start(partition)
        if self._stopping():
            # Stopped while the producer started: the stop has dropped the tasks already.
            await self._producers.close(producer)
            return
        transactional_id = self._producers.transactional_id(partition)
        collector = self._producers.collector()
        self.tasks[partition] = Task(partition, transactional_id, producer, collector=collector)

    async def drop(self, task: Task) -> None:
        """Forget a task: drop its staged writes, close its producer without committing."""
        self.tasks.pop(task.partition, None)
        self.discard_staged(task)
        task.reset_transaction()
        if task.producer is not None:
            await self._producers.close(task.producer)
            task.producer = None

    def discard_staged(self, task: Task) -> None:
        for store, _ in self.stores:
            store.discard_partition(task.partition)

    def rebuild(self, partition: int) -> None:
        """Drop the state of ``partition`` (no transaction of it is open): the stores with a
        changelog delete their database, rebuilt from the changelog by the recovery that
        follows; the others forget what they hold in memory and read it again from those."""
        for store, topic in self.stores:
            if topic is not None:
                source: ChangelogSource = store  # type: ignore[assignment]
                source.rebuild_partition(partition)
            else:
                store.discard_partition(partition)

    async def commit(self, task: Task) -> None:
        """Commit ``task``'s open transaction, if it still runs, and act on the outcome."""
        async with task.lock:
            if task.state is not TaskState.RUNNING:
                return
            started = time.monotonic()
            try:
                result = await self._committer.commit(task)
            except asyncio.CancelledError:
                # Stopped with the commit unfinished: its outcome is unknown here. Apply nothing
                # and commit nothing more on this task; the store keeps its older changelog
                # offset, so recovery replays the transaction if it did commit.
                task.state = TaskState.FAILED
                self.discard_staged(task)
                raise
            self.act(task, result, started)

    def act(self, task: Task, result: CommitResult, started: float) -> None:
        """What a commit's outcome means for the task and the stores."""
        outcome = result.outcome
        if outcome is Outcome.COMMITTED:
            self._applied(task, result.changelog_offsets, started)
        elif outcome is Outcome.ABORTED:
            self.discard_staged(task)
            task.reset_transaction()
        elif outcome is Outcome.FENCED:
            self.fenced(task, result.error)
        elif outcome is Outcome.FAILED:
            self.fail(task, result.why)
            task.reset_transaction()

    def transaction_error(self, task: Task, exc: BaseException, where: str) -> bool:
        """Stop ``task`` after a failed transaction; True when it may still abort (not fenced)."""
        if is_fenced(task.producer, exc):
            self.fenced(task, exc)
            return False
        self.fail(task, f"transaction failed {where}: {exc!r}")
        return True

    def fail(self, task: Task, why: str) -> None:
        """The open transaction of ``task`` must not commit: drop it and re-read ``p``."""
        if task.state is TaskState.RUNNING:
            log.error("partition %d: %s; aborting and re-reading it", task.partition, why)
            task.state = TaskState.FAILED
        self.discard_staged(task)
        self._request_rejoin()

    def fenced(self, task: Task, exc: BaseException | None) -> None:
        log.error(
            "partition %d: transactional id %s was fenced (%r): another worker took the "
            "partition over, or the broker aborted the open transaction after "
            "DEDUPE_TRANSACTION_TIMEOUT; stopping work on it and rejoining the group",
            task.partition,
            task.transactional_id,
            exc,
        )
        task.state = TaskState.FENCED
        self.discard_staged(task)
        task.reset_transaction()
        self._request_rejoin()

    def _applied(self, task: Task, changelog_offsets: Mapping[str, int], started: float) -> None:
        for store, topic in self.stores:
            store.commit_partition(task.partition, changelog_offsets.get(topic or ""))
        self._hooks.applied(task.partition)
        task.commits += 1
        task.committed_records += task.records
        task.last_commit_at = time.time()
        task.last_commit_seconds = time.monotonic() - started
        COMMIT_SECONDS.observe(task.last_commit_seconds)
        task.reset_transaction()
