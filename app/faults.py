"""Fault-injection points for the fault tests: off unless ``DEDUPE_FAULT_INJECTION`` is set.

``DEDUPE_FAULT_INJECTION="<point>=<action>@<n>"`` makes the worker act the ``n``-th time it
reaches ``point`` (once). Points:

- ``stored``: a record's table write is staged, its output not sent yet.
- ``sent``: the record's output is in its task's open transaction, its changelog record not yet.
- ``processed``: after a record counts as processed (its offset joined the open transaction).
- ``commit``: just before a task's commit request (EndTxn), after its offsets were sent.
- ``committed``: right after a commit succeeded, before the store applied it.
- ``rebalance``: a rebalance's new assignment, after revoked partitions were committed.
- ``assigned``: a rebalance's new tasks have their producers, their start offsets not read yet.
- ``recovering``: a changelog record was fetched for a partition whose state is being recovered.
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
- ``pause`` (``commit`` only): wait ``PAUSE_SECONDS`` before the commit request, with the
  transaction's records written to the log (so a test can look at them uncommitted);
- ``skip-fetched`` (``processed`` only): move the consumer of the record's partition to the
  partition's end without delivering the records in between, as Faust's consumer does when it
  drops a fetched batch (the stall watchdog must bring them back).
- ``hold`` (``recovering`` only): changelog records fetched during the next ``HOLD_SECONDS``
  reach the recovery only at the end of that time, in order; the consumer's position is past
  them meanwhile and the recovery's queue stays empty for more than two of its 5 s waits (the
  takeover race of fault row F16: a recovery that ends on the consumer's position loses them).

Production never sets it; the check is one attribute read per point.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from dataclasses import dataclass, field
from typing import Any

POINTS = {
    "stored",
    "sent",
    "processed",
    "commit",
    "committed",
    "rebalance",
    "assigned",
    "recovering",
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
    "hold": "recovering",
}
#: How long the ``pause`` action holds a commit.
PAUSE_SECONDS = 5.0
#: How long the ``hold`` action keeps fetched changelog records from the recovery.
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


@dataclass
class Hold:
    """The ``hold`` action's records: kept for ``seconds``, then released in order."""

    seconds: float
    messages: list[Any] = field(default_factory=list)
    done: bool = False
    release: asyncio.Future[None] | None = None


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
