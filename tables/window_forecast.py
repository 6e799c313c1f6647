"""Will the size cap shorten the window? The forecast from the observed new-id rate (pure).

A partition that takes ``r`` new ids per second fills ``DEDUPE_MAX_IDS_PER_PARTITION`` in
``cap / r`` seconds of record time; from then on it evicts its oldest ids, and a repeat older
than ``cap / r`` is forwarded again. Once that happens the effective-window warning of
``tables/seen_ids/`` speaks; this forecast speaks before, while the partition still fills,
so an operator can raise the cap or add partitions (``python -m app plan``) in time.

The rate is observed two ways, and the higher counts (a warning late is worse than early):

- over the ids held: ``held / (newest - oldest first sighting)``, the average over everything
  the partition remembers; it is known at start-up, straight after a restore;
- recent: the new ids (ids held plus ids aged out, both counted) over the last
  :data:`RECENT_HORIZON_MS` of stream time, so a rate that has just risen shows at once.

A rate needs at least :data:`MIN_SPAN_MS` of record time behind it: a burst in a partition's
first second says nothing about its daily rate. Times are record times (the window's clock),
never the wall clock.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: Least record time a rate is measured over.
MIN_SPAN_MS = 60_000
#: The recent rate looks this far back in stream time.
RECENT_HORIZON_MS = 15 * 60_000


def held_rate(held: int, oldest_ms: int | None, newest_ms: int) -> float | None:
    """New ids per second over the ids held, or None when their span is too short."""
    if oldest_ms is None or held <= 0 or newest_ms - oldest_ms < MIN_SPAN_MS:
        return None
    return held * 1000 / (newest_ms - oldest_ms)


class RecentRate:
    """New ids per second over the last :data:`RECENT_HORIZON_MS` of stream time, from samples
    of (stream time, new ids so far)."""

    def __init__(self) -> None:
        self.samples: deque[tuple[int, int]] = deque()

    def observe(self, stream_ms: int, new_ids: int) -> None:
        samples = self.samples
        if samples and (stream_ms < samples[-1][0] or new_ids < samples[-1][1]):
            samples.clear()  # the state was rebuilt or the counters restarted: start again
        samples.append((stream_ms, new_ids))
        # Keep one sample at or beyond the horizon, so the span covers all of it.
        while len(samples) > 2 and samples[1][0] <= stream_ms - RECENT_HORIZON_MS:
            samples.popleft()

    def rate(self) -> float | None:
        if len(self.samples) < 2:
            return None
        (t0, n0), (t1, n1) = self.samples[0], self.samples[-1]
        if t1 - t0 < MIN_SPAN_MS:
            return None
        return (n1 - n0) * 1000 / (t1 - t0)


@dataclass(frozen=True)
class Forecast:
    """What ``/stats`` shows under ``window_forecast``, per partition."""

    held_rate: float | None
    recent_rate: float | None
    #: cap / the higher rate: the effective window once the cap is reached (None: no rate yet).
    predicted_window_ms: int | None
    min_window_ms: int
    cap: int
    warning: str | None

    def as_dict(self) -> dict[str, object]:
        return {
            "new_ids_per_second_held": self.held_rate,
            "new_ids_per_second_recent": self.recent_rate,
            "predicted_window_ms": self.predicted_window_ms,
            "min_window_ms": self.min_window_ms,
            "warning": self.warning,
        }


def forecast(
    partition: int,
    held_rate: float | None,
    recent_rate: float | None,
    cap: int,
    min_window_ms: int,
) -> Forecast:
    """The forecast for one partition. ``min_window_ms``: DEDUPE_MIN_WINDOW, or DEDUPE_WINDOW
    when shorter (a cap that keeps the whole window shortens nothing)."""
    rates = [r for r in (held_rate, recent_rate) if r is not None and r > 0]
    if not rates:
        return Forecast(held_rate, recent_rate, None, min_window_ms, cap, None)
    rate = max(rates)
    predicted = int(cap * 1000 / rate)
    warning = None
    if predicted < min_window_ms:
        warning = (
            f"partition {partition}: at {rate:,.1f} new ids/s the size cap "
            f"(DEDUPE_MAX_IDS_PER_PARTITION={cap}) holds {predicted / 3_600_000:,.2f} h of ids, "
            f"under DEDUPE_MIN_WINDOW ({min_window_ms / 3_600_000:,.1f} h): once it is full, "
            "repeats older than that are forwarded again. Raise the cap or add partitions "
            "(python -m app plan sizes both)"
        )
    return Forecast(held_rate, recent_rate, predicted, min_window_ms, cap, warning)
