"""Retries of recovery's broker work: a doubling wait, and a limit that names what was waited for.

A restore or a follow that fails (a leader moving, a broker restarting) is tried again: at once
would ask a broker that is down many times a second, so the wait doubles from
:data:`FIRST_SECONDS` up to :data:`MAX_SECONDS`. A restore that has failed for
:data:`RESTORE_LIMIT_SECONDS` without a success raises :class:`GaveUp`, which says what it
waited for, how long and the last error: the worker then stops (Faust crashes the app on a
failed service task) and its supervisor restarts it, instead of a worker that reports "not
ready" for ever without saying why. A standby follower has no limit: it only falls behind, and
its lag (``/stats``) shows it.
"""

from __future__ import annotations

import logging
import time

log = logging.getLogger(__name__)

#: The wait after the first failure (seconds).
FIRST_SECONDS = 1.0
#: The longest wait between two tries (seconds).
MAX_SECONDS = 30.0
#: How long a restore of one partition may keep failing before the worker gives up (seconds):
#: longer than a broker's restart with its log recovery, so a restart alone never stops it.
RESTORE_LIMIT_SECONDS = 900.0


class GaveUp(RuntimeError):
    """Tried for longer than the limit without a success (the message says what and why)."""


class Backoff:
    """The waits between tries of ``what`` (see the module docstring); ``limit``: seconds of
    failures without a success after which :meth:`failed` raises :class:`GaveUp` (None: never)."""

    def __init__(self, what: str, *, limit: float | None) -> None:
        self.what = what
        self.limit = limit
        self.tries = 0
        self._delay = FIRST_SECONDS
        self._failing_since: float | None = None

    def reset(self) -> None:
        """A try succeeded: the next failure waits :data:`FIRST_SECONDS` again."""
        self.tries = 0
        self._delay = FIRST_SECONDS
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
        self._delay = min(self._delay * 2, MAX_SECONDS)
        log.warning(
            "%s failed (%r, try %d); trying again in %.1fs", self.what, error, self.tries, delay
        )
        return delay
