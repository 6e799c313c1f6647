"""The lake job's stall lines: a query on one step for 30 s, 60 s, 120 s... is named with its
step; idle waits and steps that keep changing are not."""

from __future__ import annotations

from spark.job import StallWatch


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def lines(watch: StallWatch, clock: Clock, name: str, message: str, until: float) -> list[str]:
    """What the job prints polling ``name`` twice a second on ``message`` up to ``until``."""
    printed = []
    while clock.now <= until:
        if line := watch.observe(name, message):
            printed.append(line)
        clock.now += 0.5
    return printed


def test_a_step_held_is_named_at_30_60_120_seconds() -> None:
    clock = Clock()
    watch = StallWatch(clock=clock)
    step = "Getting offsets from KafkaV2[Subscribe[out]]"
    assert lines(watch, clock, "events", step, until=130) == [
        f"events: {step!r} for 30 s",
        f"events: {step!r} for 60 s",
        f"events: {step!r} for 120 s",
    ]


def test_idle_waits_are_not_stalls() -> None:
    clock = Clock()
    watch = StallWatch(clock=clock)
    assert lines(watch, clock, "events", "Waiting for data to arrive", until=300) == []
    assert lines(watch, clock, "events", "Waiting for next trigger", until=600) == []


def test_a_new_step_starts_its_own_clock_per_query() -> None:
    clock = Clock()
    watch = StallWatch(clock=clock)
    assert lines(watch, clock, "events", "Processing new data", until=25) == []
    # from 25.5 s on a new step: 29.5 s on it at 55 s, nothing yet
    assert lines(watch, clock, "events", "Initializing sources", until=55) == []
    # the other query's first sight of the same step at 55.5 s: its own clock
    assert lines(watch, clock, "event_counts", "Initializing sources", until=86) == [
        "event_counts: 'Initializing sources' for 30 s"
    ]
    assert lines(watch, clock, "events", "Initializing sources", until=86.5) == [
        "events: 'Initializing sources' for 61 s"
    ]
