"""The fault tests' fault points: chosen by the factory only when ``DEDUPE_FAULT_INJECTION`` is set.

``DEDUPE_FAULT_INJECTION="<point>=<action>@<n>"`` (read from the environment by
:func:`from_environment`, never part of the worker's settings) makes the worker act the
``n``-th time it reaches ``point`` (once). :class:`InjectedFaults` implements
``app.faults.points.FaultPoints``, whose production methods do nothing, for the points of the
consumer, the rebalances and the stores; the points of a record's send and of the commit are
reached by the producers of its client supplier (:attr:`InjectedFaults.producer_supplier`,
``app/faults/producers.py``), which the factory hands the worker instead of production's.
Points:

- ``stored``: a record's table write is staged, its output not sent yet (the output batch's
  append, ``app/faults/producers.py``).
- ``sent``: the record's output is in its task's open transaction, its changelog record not yet.
- ``processed``: after a record counts as processed (its offset joined the open transaction).
- ``commit``: a task's commit request (EndTxn, the producer's ``commit_transaction``), after
  its offsets were sent.
- ``committed``: right after a task's commit request succeeded, before the store applied it.
- ``rebalance``: a rebalance's new assignment, after revoked partitions were committed.
- ``assigned``: a rebalance's new tasks have their producers, their start offsets not read yet.
- ``restoring``: the bulk restorer's reader fetched changelog records (a fetch that brought
  any).
- ``restored``: the bulk restorer's records written reached the next thousand (into an empty
  store: without the write-ahead log, before the restore's flush).

Actions:

- ``kill``: SIGKILL this process (a crash at an exact point);
- ``term``: SIGTERM this process (a graceful stop at an exact point); at ``assigned`` the
  rebalance then waits a second, so the stop runs while the rebalance is unfinished;
- ``lose-response`` (``commit`` only): send the commit request, then behave as if its answer
  was lost (a timeout): the outcome is unknown to the worker, though the broker commits;
- ``lose-request`` (``commit`` only): behave as if the request timed out without sending it:
  the outcome is unknown to the worker, and the transaction did not commit.
- ``roll-back`` (``commit`` only): abort the transaction instead of committing it, yet report
  it committed, as a broker that acknowledged a commit and then rolled it back; the stores
  apply it, and the worker then kills itself (SIGKILL) before another transaction can commit;
- ``pause`` (``commit`` only): wait ``PAUSE_SECONDS`` (5 s, within the commit's timeout)
  before the commit request, with the transaction's records written to the log (so a test can
  look at them uncommitted);
- ``skip-fetched`` (``processed`` only): move the consumer of the record's partition to the
  partition's end without delivering the records in between, as Faust's consumer does when it
  drops a fetched batch (the stall watchdog must bring them back).
- ``hold`` (``restoring`` only): the fetched records, and from then on the first fetch with
  records of each other partition, reach the restorer only after ``HOLD_SECONDS``; the restore
  waits meanwhile, while Faust's consumer is at the end of the partition and its recovery queue
  stays empty for more than two of Faust's 5 s waits (the takeover race of fault row F16: a
  recovery that ends on the consumer's position, or on anything but the restore reaching the
  end of every partition, ends before the store holds them).

Production never sets it, and never imports this module.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from aiokafka.structs import TopicPartition

from app.faults.points import FaultPoints
from app.faults.producers import FaultProducers
from app.faults.skipping import EndOf, Seek, SkippingHandler

if TYPE_CHECKING:
    from app.eos.batch import BatchHandler
    from app.eos.producer import ProducerSupplier
    from app.eos.task import Task
    from recovery.reader import Fetched
    from recovery.restore import OnProgress, Progress, RecordSource

log = logging.getLogger(__name__)

#: The environment variable the fault tests set (documented in docs/testing.md).
ENV = "DEDUPE_FAULT_INJECTION"

POINTS = {
    "stored",
    "sent",
    "processed",
    "commit",
    "committed",
    "rebalance",
    "assigned",
    "restoring",
    "restored",
}
ACTIONS = {
    "kill",
    "term",
    "lose-response",
    "lose-request",
    "roll-back",
    "pause",
    "skip-fetched",
    "hold",
}
#: The point each action other than ``kill`` applies to.
ACTION_POINT = {
    "lose-response": "commit",
    "lose-request": "commit",
    "roll-back": "commit",
    "pause": "commit",
    "skip-fetched": "processed",
    "hold": "restoring",
}
#: How long the ``hold`` action keeps fetched changelog records from the restorer: more than
#: two of the 5 s waits after which Faust's own recovery loop ends partitions on the consumer's
#: position.
HOLD_SECONDS = 12.0
_SPEC = re.compile(r"^(?P<point>[a-z]+)=(?P<action>[a-z-]+)@(?P<n>\d+)$")


@dataclass
class FaultPlan:
    point: str
    action: str
    at: int
    reached: int = 0
    fired: bool = False
    #: ``roll-back``: the partition whose rolled-back transaction was reported committed.
    rolled_back: int | None = None

    def reach(self, point: str) -> str | None:
        """Count a visit to ``point``; the action to take now, if any (``kill`` never returns)."""
        if self.fired or point != self.point:
            return None
        self.reached += 1
        if self.reached < self.at:
            return None
        self.fired = True
        if self.action == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.action == "term":
            os.kill(os.getpid(), signal.SIGTERM)
        return self.action

    def after_applied(self, partition: int) -> None:
        """The stores applied a commit of ``partition``: the one ``roll-back`` reported?"""
        if self.rolled_back == partition:
            os.kill(os.getpid(), signal.SIGKILL)


class HeldSource:
    """The restorer's reader with the ``hold`` action at the ``restoring`` point."""

    def __init__(self, plan: FaultPlan, source: RecordSource) -> None:
        self.plan = plan
        self.source = source
        #: The partitions whose first fetch was held (none: the action has not fired).
        self.held: set[TopicPartition] = set()

    async def fetch(
        self, tp: TopicPartition, offset: int, end: int, *, max_wait_ms: int | None = None
    ) -> Fetched:
        fetched = await self.source.fetch(tp, offset, end, max_wait_ms=max_wait_ms)
        if (
            fetched.records
            and tp not in self.held
            and (bool(self.held) or self.plan.reach("restoring") == "hold")
        ):
            self.held.add(tp)
            log.warning(
                "fault injection: holding %d fetched changelog records of %s-%d for %gs",
                len(fetched.records),
                tp.topic,
                tp.partition,
                HOLD_SECONDS,
            )
            await asyncio.sleep(HOLD_SECONDS)
            log.warning("fault injection: releasing the held changelog records")
        return fetched

    async def close(self) -> None:
        await self.source.close()


def parse(spec: str) -> FaultPlan | None:
    """``"commit=lose-response@5"`` -> a plan; ``""`` -> None. Raises ValueError when malformed."""
    if not spec:
        return None
    match = _SPEC.match(spec)
    if match is None or match["point"] not in POINTS or match["action"] not in ACTIONS:
        raise ValueError(
            f"{spec!r}: use <point>=<action>@<n> with point in {sorted(POINTS)} and action "
            f"in {sorted(ACTIONS)}"
        )
    point = ACTION_POINT.get(match["action"], match["point"])
    if match["point"] != point:
        raise ValueError(f"{spec!r}: {match['action']} only applies to the {point} point")
    return FaultPlan(match["point"], match["action"], int(match["n"]))


def from_environment(environ: Mapping[str, str] = os.environ) -> InjectedFaults | None:
    """The fault points ``DEDUPE_FAULT_INJECTION`` asks for; None when it is unset or empty.
    Raises ValueError (naming the variable) when it is malformed."""
    try:
        plan = parse(environ.get(ENV, ""))
    except ValueError as exc:
        raise ValueError(f"{ENV}: {exc}") from None
    return None if plan is None else InjectedFaults(plan)


class InjectedFaults(FaultPoints):
    """The fault points with ``plan``'s action at its point (see the module docstring)."""

    def __init__(self, plan: FaultPlan) -> None:
        self.plan = plan
        #: ``skip-fetched``: records below these offsets are not delivered.
        self.skipping: dict[TopicPartition, int] = {}
        #: The worker's client supplier: producers that act at the send and commit points.
        self.producer_supplier: ProducerSupplier = partial(FaultProducers, plan)

    def applied(self, partition: int) -> None:
        self.plan.after_applied(partition)

    def rebalance(self) -> None:
        self.plan.reach("rebalance")

    async def assigned(self) -> None:
        if self.plan.reach("assigned") == "term":
            await asyncio.sleep(1.0)  # the stop runs while the rebalance is unfinished

    def batch_handler(
        self, handler: BatchHandler, tasks: dict[int, Task], end_of: EndOf, seek: Seek
    ) -> BatchHandler:
        return SkippingHandler(self.plan, self.skipping, handler, tasks, end_of, seek).handle

    def seeked_back(self, tp: TopicPartition) -> None:
        self.skipping.pop(tp, None)

    def restore_source(self, source: RecordSource) -> RecordSource:
        return HeldSource(self.plan, source)

    def restore_progress(self, on_progress: OnProgress) -> OnProgress:
        plan = self.plan

        def progress(done: Progress, written: int) -> None:
            on_progress(done, written)
            before = done.records - written
            for _ in range(done.records // 1000 - before // 1000):
                plan.reach("restored")

        return progress
