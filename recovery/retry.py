"""Retries of broker work: a doubling wait, and a limit that names what was waited for.

The one backoff policy of the worker: recovery's restores and follows, and the start-up
questions to the cluster (:func:`retrying`). A restore or a follow that fails (a leader moving,
a broker restarting) is tried again: at once would ask a broker that is down many times a
second, so the wait doubles from
:data:`FIRST_SECONDS` up to :data:`MAX_SECONDS`. A restore that has failed for
:data:`RESTORE_LIMIT_SECONDS` without a success raises :class:`GaveUp`, which says what it
waited for, how long and the last error: the worker then stops (Faust crashes the app on a
failed service task) and its supervisor restarts it, instead of a worker that reports "not
ready" for ever without saying why. A standby follower has no limit: it only falls behind, and
its lag (``/stats``) shows it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError

T = TypeVar("T")

log = logging.getLogger(__name__)

#: The wait after the first failure (seconds).
FIRST_SECONDS = 1.0
#: The longest wait between two tries (seconds).
MAX_SECONDS = 30.0
#: How long a restore of one partition may keep failing before the worker gives up (seconds):
#: longer than a broker's restart with its log recovery, so a restart alone never stops it.
RESTORE_LIMIT_SECONDS = 900.0
#: How long the start-up waits for a cluster that answers with retriable errors: longer than a
#: broker's restart and re-election on a loaded machine.
START_PATIENCE_SECONDS = 90.0


class GaveUp(RuntimeError):
    """Tried for longer than the limit without a success (the message says what and why)."""


class Backoff:
    """The waits between tries of ``what`` (see the module docstring); ``limit``: seconds of
    failures without a success after which :meth:`failed` raises :class:`GaveUp` (None: never)."""

    def __init__(
        self,
        what: str,
        *,
        limit: float | None,
        first: float = FIRST_SECONDS,
        longest: float = MAX_SECONDS,
    ) -> None:
        self.what = what
        self.limit = limit
        self.tries = 0
        self._first = first
        self._longest = longest
        self._delay = first
        self._failing_since: float | None = None

    def reset(self) -> None:
        """A try succeeded: the next failure waits the first wait again."""
        self.tries = 0
        self._delay = self._first
        self._failing_since = None

    def failed(self, error: BaseException) -> float:
        """Record a failure; the seconds to wait before the next try. Raises :class:`GaveUp`
        once the failures have lasted longer than the limit."""
        now = time.monotonic()
        if self._failing_since is None:
            self._failing_since = now
        self.tries += 1
        failing = now - self._failing_since
        if self.limit is not None and failing >= self.limit:
            raise GaveUp(
                f"{self.what}: failed {self.tries} times over {failing:.0f}s (limit "
                f"{self.limit:g}s), waiting for the broker to answer; last error: {error!r}"
            ) from error
        delay = self._delay
        self._delay = min(self._delay * 2, self._longest)
        log.warning(
            "%s failed (%r, try %d); trying again in %.1fs", self.what, error, self.tries, delay
        )
        return delay


async def retrying(
    what: str, ask: Callable[[], Awaitable[T]], patience: float = START_PATIENCE_SECONDS
) -> T:
    """``await ask()``, again (a fresh call, so a fresh client) after each retriable Kafka
    error, for up to ``patience`` seconds of failures; then :class:`GaveUp`, naming the last
    error. Any other error is raised at once.

    A worker may start while a broker is down: the admin client then meets it as
    ``NodeNotReadyError``, a coordinator that moves, or a leader not elected yet, all retriable
    in Kafka's terms. The worker's own consumer and producers wait for the cluster in that
    case; its start-up checks must too, or a worker started during a failover exits (cluster
    row C3: a worker joining as the group coordinator's broker is killed). The waits are short
    (0.5 s doubling to 5 s): a start-up is waited on by an operator."""
    backoff = Backoff(what, limit=patience, first=0.5, longest=5.0)
    while True:
        try:
            return await ask()
        except KafkaError as exc:
            if not exc.retriable:
                raise
            delay = backoff.failed(exc)
        await asyncio.sleep(delay)
