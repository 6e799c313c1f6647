"""The worker's fault points of the consumer, the rebalances and the stores: where the fault
tests may act, and production's no-op.

The factory hands one :class:`FaultPoints` to the parts that reach a point (the transaction
manager, the task life cycle, the consumer, the restorer's reader and progress). Production gets
this class, whose methods do nothing: the protocol's code calls them without a branch, and the
per-record loop does not call them at all (the processed point and ``skip-fetched`` wrap the
batch handler instead, see :meth:`FaultPoints.batch_handler`).
The fault tests get ``app.faults.injection.InjectedFaults``, chosen by the factory only when
``DEDUPE_FAULT_INJECTION`` is set; each point's meaning is in that module's docstring.

The points of a record's send and of the commit are not here: the fault tests reach them
through the producers the worker is handed (``app/faults/producers.py``), as Kafka Streams' tests
hand a ``MockProducer`` in through a ``KafkaClientSupplier``. Outcome-changing actions here
wrap a call the worker makes anyway (the batch handler, the restorer's reader and progress
callback).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiokafka.structs import TopicPartition

    from app.eos.batch import BatchHandler
    from app.eos.task import Task
    from recovery.restore import OnProgress, RecordSource


class FaultPoints:
    """The fault points of the consumer, the rebalances and the stores, as production runs
    them: nothing happens."""

    def applied(self, partition: int) -> None:
        """The stores applied a commit of ``partition`` (where a ``roll-back`` ends)."""

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
