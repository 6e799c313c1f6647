"""The worker's fault points: where the fault tests may act, and production's no-op.

The factory hands one :class:`FaultPoints` to the parts that reach a point (the deduplicator,
the transaction manager, the committer, the task life cycle, the consumer, the restorer's
reader and progress). Production gets this class, whose methods do nothing: the protocol's
code calls them without a branch, and the per-record loop does not call them at all (the
processed point and ``skip-fetched`` wrap the batch handler instead, see
:meth:`FaultPoints.batch_handler`).
The fault tests get ``app.fault_injection.InjectedFaults``, chosen by the factory only when
``DEDUPE_FAULT_INJECTION`` is set; each point's meaning is in that module's docstring.

Outcome-changing actions wrap a call the protocol makes anyway (the commit request, the batch
handler, the restorer's reader and progress callback), as Kafka's own tests swap the client for a
``MockProducer`` whose ``commitTransaction`` can be told to fail (apache/kafka
``clients/src/main/java/org/apache/kafka/clients/producer/MockProducer.java``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from aiokafka.structs import TopicPartition

    from app.eos.batch import BatchHandler
    from app.eos.task import Task
    from recovery.restore import OnProgress, RecordSource


class FaultPoints:
    """Every fault point, as production runs it: nothing happens."""

    def stored(self) -> None:
        """A record's table write is staged, its output not sent yet."""

    def sent(self) -> None:
        """The record's output is in its task's open transaction, its changelog record not."""

    async def before_commit(self, task: Task) -> None:
        """Just before ``task``'s commit request, after its offsets were sent (outside the
        commit's timeout)."""

    def commit_request(self, task: Task, producer: Any) -> Awaitable[None]:
        """The commit request (EndTxn) of ``task``'s transaction (awaited within the commit's
        timeout)."""
        request: Awaitable[None] = producer.commit_transaction()
        return request

    def committed(self, partition: int) -> None:
        """A commit of ``partition`` succeeded; the stores have not applied it yet."""

    def applied(self, partition: int) -> None:
        """The stores applied a commit of ``partition``."""

    def rebalance(self) -> None:
        """A rebalance's new assignment, after revoked partitions were committed."""

    async def assigned(self) -> None:
        """A rebalance's new tasks have their producers, their start offsets not read yet."""

    def batch_handler(
        self,
        handler: BatchHandler,
        tasks: dict[int, Task],
        end_of: Callable[[TopicPartition], Awaitable[int]],
        seek: Callable[[TopicPartition, int], Awaitable[None]],
    ) -> BatchHandler:
        """The handler the consumer hands source batches to (``tasks``: the manager's;
        ``end_of`` a partition's stable end; ``seek`` moves the consumer of a partition)."""
        return handler

    def seeked_back(self, tp: TopicPartition) -> None:
        """The stall watchdog moved the consumer of ``tp`` back to a position."""

    def restore_source(self, source: RecordSource) -> RecordSource:
        """What the bulk restorer reads changelog records through (the changelog reader)."""
        return source

    def restore_progress(self, on_progress: OnProgress) -> OnProgress:
        """The bulk restorer's progress callback."""
        return on_progress


#: Production's fault points.
NO_FAULTS = FaultPoints()
