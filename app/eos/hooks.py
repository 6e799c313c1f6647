"""Where the transaction manager lets its maker watch or wrap it: the handler it gives the
consumer, a rebalance's moments, a seek back of the stall watchdog, and a commit the stores
applied. Production's hooks (this class) do nothing; the protocol's code calls them without a
branch, and the per-record loop not at all (a wrapper of the batch handler sees the batches).

The fault tests' hooks (``app/faults/points.py``, ``app/faults/injection.py``) act at them. They
are declared here so that ``app/eos`` depends on no module of the worker; the producers' points
(a record's send, the commit) are not hooks: the fault tests wrap the producers the client
supplier makes (``app.eos.producer.TransactionalProducers``), as Kafka Streams' tests hand a
``MockProducer`` in through a ``KafkaClientSupplier``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiokafka.structs import TopicPartition

    from app.eos.batch import BatchHandler
    from app.eos.task import Task


class ManagerHooks:
    """The transaction manager's hooks, as production runs them: nothing happens."""

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


#: Production's hooks.
NO_HOOKS = ManagerHooks()
