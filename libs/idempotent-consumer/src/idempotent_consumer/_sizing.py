"""Sizing the bounded memory store: how many repeats a fixed array of ``N`` slots catches.

Each claim of a new id writes one uniformly chosen slot, so after ``x`` more claims an id's
slot has been overwritten with probability ``1 - (1 - 1/N)**x``: a repeat arriving ``x``
claims behind its original is caught with probability ``(1 - 1/N)**x``.
"""

from __future__ import annotations

import math


def catch_rate(slots: int, after: int) -> float:
    """Share of repeats caught when they arrive ``after`` claims behind their original:
    ``(1 - 1/slots)**after``."""
    if slots < 1 or after < 0:
        raise ValueError("slots must be >= 1 and after >= 0")
    if slots == 1:
        return 1.0 if after == 0 else 0.0
    return math.exp(after * math.log1p(-1.0 / slots))


def slots_for(catch: float, after: int) -> int:
    """Slots needed to catch a share ``catch`` of the repeats that arrive ``after`` claims
    behind their original: the least N with ``(1 - 1/N)**after >= catch``."""
    if not 0.0 < catch < 1.0:
        raise ValueError("catch must be between 0 and 1 (exclusive)")
    if after < 1:
        return 1
    # 1 - catch**(1/after), without the cancellation of 1 - (a number close to 1)
    n = math.ceil(-1.0 / math.expm1(math.log(catch) / after))
    while catch_rate(n, after) < catch:  # guard the float rounding at the boundary
        n += 1
    return n


def window(slots: int, catch: float) -> int:
    """How many claims behind its original a repeat can arrive and still be caught with
    probability at least ``catch`` (the effective window in messages)."""
    if not 0.0 < catch < 1.0:
        raise ValueError("catch must be between 0 and 1 (exclusive)")
    if slots == 1:
        return 0
    return math.floor(math.log(catch) / math.log1p(-1.0 / slots))
