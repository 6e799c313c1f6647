"""The worker's fault points of the consumer, the rebalances and the stores: where the fault
tests may act, and production's no-op.

The factory hands one :class:`FaultPoints` to the parts that reach a point: the transaction
manager takes it as its hooks (``app/eos/hooks.py``, which it declares: the consumer, the
rebalances, the stores), the bulk restorer's reader and progress are wrapped by it. Production
gets this class, whose methods do nothing (the processed point and ``skip-fetched`` wrap the
batch handler, see :meth:`app.eos.hooks.ManagerHooks.batch_handler`).
The fault tests get ``app.faults.injection.InjectedFaults``, chosen by the factory only when
``DEDUPE_FAULT_INJECTION`` is set; each point's meaning is in that module's docstring.

The points of a record's send and of the commit are not here: the fault tests reach them
through the producers the worker is handed (``app/faults/producers.py``), as Kafka Streams' tests
hand a ``MockProducer`` in through a ``KafkaClientSupplier``. Outcome-changing actions here
wrap a call the worker makes anyway (the batch handler, the restorer's reader and progress
callback).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from app.eos.hooks import ManagerHooks

if TYPE_CHECKING:
    from recovery.restore import OnProgress, RecordSource


class FaultPoints(ManagerHooks):
    """The fault points, as production runs them: nothing happens. The transaction manager's
    (``app.eos.hooks.ManagerHooks``) and the bulk restorer's."""

    def restore_source(self, source: RecordSource) -> RecordSource:
        """What the bulk restorer reads changelog records through (the changelog reader)."""
        return source

    def restore_progress(self, on_progress: OnProgress) -> OnProgress:
        """The bulk restorer's progress callback."""
        return on_progress


#: Production's fault points.
NO_FAULTS = FaultPoints()
