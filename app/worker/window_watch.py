"""The worker's side of the window forecast (the rule: ``tables/window_forecast.py``).

Once the worker is ready (its partitions' state restored) and every :data:`CHECK_EVERY`
seconds after, it samples each partition it owns, logs a warning for each partition whose
forecast is short (when it turns short, then at most every :data:`REPEAT_EVERY`) and, once
per assignment, the forecast of one that is not, and keeps
the forecast that ``/stats`` (``window_forecast``) and ``/metrics``
(``dedupe_predicted_window_seconds``) show.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from tables.seen_ids import SeenIds
from tables.window_forecast import Forecast, RecentRate, forecast, held_rate

log = logging.getLogger(__name__)

#: Seconds between two samples of a partition.
CHECK_EVERY = 30.0
#: Seconds between two warnings of a partition whose forecast stays short.
REPEAT_EVERY = 3600.0


class WindowWatch:
    """The forecast of each partition this worker owns, and its warnings."""

    def __init__(self, seen: SeenIds) -> None:
        self.seen = seen
        self.recent: dict[int, RecentRate] = {}
        self.oldest_at_start: dict[int, int | None] = {}
        self.warned_at: dict[int, float] = {}
        #: Partitions whose forecast was logged since they were assigned here.
        self.told: set[int] = set()
        self.checked_at = -1e18

    def oldest_first_seen_ms(self, partition: int, scan: bool = False) -> int | None:
        """The oldest first sighting held (to a slot's width): the age-out's own figure once a
        record was processed, else read once from the committed counts (the state as
        restored). ``scan``: read them now if not read yet; only :meth:`check` does, when the
        worker is ready, so a web request never opens a database that is being restored."""
        known = self.seen.status(partition)["oldest_first_seen_ms"]
        if known is not None:
            return known
        if scan and partition not in self.oldest_at_start:
            self.oldest_at_start[partition] = self.seen.oldest_first_seen_ms(partition)
        return self.oldest_at_start.get(partition)

    def _newest(self, partition: int, live: int | None) -> int:
        """Stream time: the live figure once a record was processed, else the restored one."""
        return self.seen.store.summary(partition).newest_ms if live is None else live

    def forecast(self, partition: int, scan: bool = False) -> Forecast:
        s = self.seen.status(partition)
        held, newest = s["ids_held"] or 0, self._newest(partition, s["newest_first_seen_ms"])
        recent = self.recent.get(partition)
        return forecast(
            partition,
            held_rate(held, self.oldest_first_seen_ms(partition, scan), newest),
            None if recent is None else recent.rate(),
            self.seen.cap,
            self.seen.min_window_ms,
        )

    def check(self, partitions: Iterable[int]) -> None:
        """Sample and warn for ``partitions`` (those this worker owns, its state ready)."""
        now = time.monotonic()
        partitions = list(partitions)
        kept_for = set(self.recent) | set(self.oldest_at_start) | set(self.warned_at) | self.told
        for gone in kept_for - set(partitions):  # revoked: its state may come back another
            for kept in (self.recent, self.oldest_at_start, self.warned_at):
                kept.pop(gone, None)
            self.told.discard(gone)
        for p in partitions:
            s = self.seen.status(p)
            new_ids = (s["ids_held"] or 0) + (s["expired"] or 0) + (s["evicted"] or 0)
            newest = self._newest(p, s["newest_first_seen_ms"])
            if newest:  # an empty partition has no stream time yet: nothing to measure from
                self.recent.setdefault(p, RecentRate()).observe(newest, new_ids)
            f = self.forecast(p, scan=True)
            if f.warning is None:
                self.warned_at.pop(p, None)
                if f.predicted_window_ms is not None and p not in self.told:
                    # Once per assignment: what the cap leaves at the rate seen so far.
                    log.info(
                        "partition %d: the size cap holds %.1f h of ids at the observed new-id "
                        "rate, not under DEDUPE_MIN_WINDOW (%.1f h)",
                        p,
                        f.predicted_window_ms / 3_600_000,
                        f.min_window_ms / 3_600_000,
                    )
            elif now - self.warned_at.get(p, -1e18) >= REPEAT_EVERY:
                self.warned_at[p] = now
                log.warning("%s", f.warning)
            if f.predicted_window_ms is not None:
                self.told.add(p)

    async def tick(
        self, ready: Callable[[], bool], partitions: Callable[[], Iterable[int]]
    ) -> None:
        """Run by a one-second timer: checks as soon as the worker is ready, then every
        :data:`CHECK_EVERY` seconds."""
        now = time.monotonic()
        if now - self.checked_at < CHECK_EVERY or not ready():
            return
        self.checked_at = now
        self.check(sorted(partitions()))
