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

Actions:

- ``kill``: SIGKILL this process (a crash at an exact point);
- ``term``: SIGTERM this process (a graceful stop at an exact point); at ``assigned`` the
  rebalance then waits a second, so the stop runs while the rebalance is unfinished;
- ``lose-response`` (``commit`` only): send the commit request, then behave as if its answer
  was lost (a timeout): the outcome is unknown to the worker, though the broker commits;
- ``lose-request`` (``commit`` only): behave as if the request timed out without sending it:
  the outcome is unknown to the worker, and the transaction did not commit.
- ``pause`` (``commit`` only): wait ``PAUSE_SECONDS`` before the commit request, with the
  transaction's records written to the log (so a test can look at them uncommitted);
- ``skip-fetched`` (``processed`` only): move the consumer of the record's partition to the
  partition's end without delivering the records in between, as Faust's consumer does when it
  drops a fetched batch (the stall watchdog must bring them back).

Production never sets it; the check is one attribute read per point.
"""

from __future__ import annotations

import os
import re
import signal
from dataclasses import dataclass

POINTS = {"stored", "sent", "processed", "commit", "committed", "rebalance", "assigned"}
ACTIONS = {"kill", "term", "lose-response", "lose-request", "pause", "skip-fetched"}
#: The point each action other than ``kill`` applies to.
ACTION_POINT = {
    "lose-response": "commit",
    "lose-request": "commit",
    "pause": "commit",
    "skip-fetched": "processed",
}
#: How long the ``pause`` action holds a commit.
PAUSE_SECONDS = 5.0
_SPEC = re.compile(r"^(?P<point>[a-z]+)=(?P<action>[a-z-]+)@(?P<n>\d+)$")


@dataclass
class FaultPlan:
    point: str
    action: str
    at: int
    reached: int = 0
    fired: bool = False

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
