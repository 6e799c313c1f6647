"""``TransactionalTable._end_recovery_at_marker``: when the recovery of a changelog partition
ends at its last commit marker, and when it is left to Faust. The real broker's answer is
covered by tests/integration/test_age_out.py (a rebuild from the changelog)."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import pytest
from faust.types import TP

from tables.transactional import TransactionalTable

CHANGELOG = TP("app-seen_ids-changelog", 2)


class Recovery:
    def __init__(self, last: int) -> None:
        self.active_highwaters: Counter[TP] = Counter({CHANGELOG: last})
        self.active_offsets: Counter[TP] = Counter()
        self.active_tps = {CHANGELOG}
        self.flushed = 0

    def flush_buffers(self) -> None:
        self.flushed += 1


def table(last: int, answer: int | BaseException | None) -> Any:
    asked: list[tuple[TP, int, int]] = []

    async def first_committed_record(tp: TP, start: int, end: int) -> int | None:
        asked.append((tp, start, end))
        if isinstance(answer, BaseException):
            raise answer
        return answer

    persisted: dict[TP, int] = {}
    return SimpleNamespace(
        app=SimpleNamespace(tables=SimpleNamespace(recovery=Recovery(last))),
        transactions=SimpleNamespace(first_committed_record=first_committed_record),
        store=SimpleNamespace(set_persisted_offset=persisted.__setitem__),
        asked=asked,
        persisted=persisted,
    )


async def end(t: Any, tp: TP, offset: int) -> Any:
    await TransactionalTable._end_recovery_at_marker(t, tp, offset)
    return t.app.tables.recovery


async def test_nothing_after_the_record_before_the_highwater_ends_the_recovery() -> None:
    t = table(last=100, answer=None)
    recovery = await end(t, CHANGELOG, 99)
    assert t.asked == [(CHANGELOG, 100, 101)]  # [marker, last stable offset)
    assert recovery.flushed == 1  # the buffered records are applied before the offset
    assert t.persisted == {CHANGELOG: 100}  # held through the marker
    assert recovery.active_offsets[CHANGELOG] == 100  # nothing remaining


async def test_a_record_still_to_come_is_left_to_fausts_recovery() -> None:
    t = table(last=100, answer=100)
    recovery = await end(t, CHANGELOG, 99)
    assert t.asked and recovery.flushed == 0 and t.persisted == {}
    assert recovery.active_offsets[CHANGELOG] == 0


@pytest.mark.parametrize("error", [TimeoutError("no answer"), OSError("refused")])
async def test_no_answer_from_the_broker_is_left_to_fausts_recovery(error: Exception) -> None:
    t = table(last=100, answer=error)
    recovery = await end(t, CHANGELOG, 99)
    assert recovery.flushed == 0 and t.persisted == {}
    assert recovery.active_offsets[CHANGELOG] == 0


@pytest.mark.parametrize(
    ("tp", "offset"),
    [
        (CHANGELOG, 98),  # two offsets remaining: records may still come, no question asked
        (CHANGELOG, 100),  # at the highwater already
        (TP("app-seen_ids-changelog", 3), 99),  # a standby partition (not active)
    ],
)
async def test_the_broker_is_asked_only_at_the_record_before_the_highwater(
    tp: TP, offset: int
) -> None:
    t = table(last=100, answer=None)
    recovery = await end(t, tp, offset)
    assert t.asked == [] and recovery.flushed == 0
