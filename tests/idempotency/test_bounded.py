"""The bounded memory store: full ids (never a false positive), erase on failure, and the
catch rate against (1 - 1/N)**x with a fixed seed."""

from __future__ import annotations

import math

import pytest
from idempotent_consumer import (
    MemoryStore,
    SyncIdempotency,
    catch_rate,
    slots_for,
    window,
)


def test_sizing_from_the_formula() -> None:
    n = slots_for(0.9, 3_600_000)
    assert 34_100_000 < n < 34_250_000  # ~34.2M slots for 90% at 3.6M messages
    assert catch_rate(n, 3_600_000) >= 0.9 > catch_rate(n - 1, 3_600_000)
    # the NSQ design's 1.56M slots catch about 10% of those repeats, not 90%
    assert catch_rate(1_560_000, 3_600_000) == pytest.approx(0.0995, abs=0.001)
    assert n / 1_560_000 == pytest.approx(21.9, abs=0.1)
    assert window(n, 0.9) >= 3_600_000
    assert catch_rate(10, 0) == 1.0 and slots_for(0.5, 1) == 2


def test_a_match_is_certain_and_a_miss_only_forgets() -> None:
    store = MemoryStore(1)  # every id shares the one slot
    idem = SyncIdempotency(store, "p")
    with idem.claim("a") as claim:
        claim.complete("A")
    with idem.claim("b") as claim:  # same slot, another id: new, never taken for "a"
        assert not claim.done
        claim.complete("B")
    with idem.claim("a") as claim:  # "a" was overwritten: it runs again (a miss)
        assert not claim.done
    assert store.metrics().evictions == 2


def test_a_failed_handler_erases_its_slot() -> None:
    store = MemoryStore(100)
    idem = SyncIdempotency(store, "p")
    with pytest.raises(RuntimeError), idem.claim("x"):
        raise RuntimeError("handler failed")
    assert not store.contains("p", "x")
    with idem.claim("x") as claim:  # the redelivery is processed, not dropped
        assert not claim.done


def test_catch_rate_matches_the_formula(figures: list[str]) -> None:
    slots, stream = 4_000, 50_000
    distances = [400, 4_000, 9_200]  # expected catch rates ~0.90, ~0.37, ~0.10
    store = MemoryStore(slots, seed=42, horizon=4_000)
    idem = SyncIdempotency(store, "p")
    ids = [f"evt-{i:06d}" for i in range(stream)]
    hits = dict.fromkeys(distances, 0)
    checks = dict.fromkeys(distances, 0)
    for j, event_id in enumerate(ids):
        with idem.claim(event_id) as claim:
            claim.complete()
        if j < 12_000:  # let the array fill up first (steady state)
            continue
        for x in distances:
            checks[x] += 1
            hits[x] += store.contains("p", ids[j - x])
    lines = []
    for x in distances:
        observed = hits[x] / checks[x]
        expected = catch_rate(slots, x)
        # consecutive checks overlap, so allow well beyond one binomial sigma
        sigma = math.sqrt(expected * (1 - expected) / checks[x])
        assert abs(observed - expected) < max(0.015, 6 * sigma), (x, observed, expected)
        lines.append(f"{x}: {observed:.4f} vs {expected:.4f}")
    m = store.metrics()
    assert m.observed_catch_rate is not None
    assert abs(m.observed_catch_rate - m.expected_catch_rate) < 0.02, m
    figures.append(
        f"bounded store: N={slots}, {stream} ids, seed 42; caught after x claims, observed vs "
        f"(1-1/N)^x: {'; '.join(lines)}; metric at horizon {m.horizon}: "
        f"{m.observed_catch_rate:.4f} vs {m.expected_catch_rate:.4f}"
    )
