"""The recovery end rule (``recovery/end_rule.py``) as the Faust adapter asks it: when the
recovery of an active changelog partition ends, and when it reads a partition again. The rule:
a partition ends only when the changelog reader finds no committed record between the last
record applied and the end, never on the consumer's position (issue 18). The reader's answers
on the real broker: tests/integration/test_batch_reader.py; whole recoveries:
tests/integration/test_age_out.py (a rebuild ends at the commit markers) and
tests/faults/test_recovery_takeover.py. The retry backoff and limit: the last two tests."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from faust.types import TP

from recovery.end_rule import EndRule
from recovery.faust_adapter import TransactionalRecovery, TransactionalTableManager
from recovery.retry import FIRST_SECONDS, Backoff, GaveUp

CHANGELOG = TP("app-seen_ids-changelog", 2)


class Consumer:
    def __init__(self, position: int | None) -> None:
        self._position = position
        self.seeks: list[tuple[TP, int]] = []

    async def position(self, tp: TP) -> int | None:
        return self._position

    async def seek(self, tp: TP, offset: int) -> None:
        self.seeks.append((tp, offset))


def recovery(
    *, applied: int, highwater: int, answer: int | BaseException | None, position: int = 0
) -> Any:
    """A stand-in for the recovery service with one active partition."""
    asked: list[tuple[TP, int, int]] = []
    persisted: dict[TP, int] = {}
    r = SimpleNamespace(
        active_highwaters=Counter({CHANGELOG: highwater}),
        active_offsets=Counter({CHANGELOG: applied}),
        active_tps={CHANGELOG},
        tp_to_table={
            CHANGELOG: SimpleNamespace(
                data=SimpleNamespace(set_persisted_offset=persisted.__setitem__)
            )
        },
        app=SimpleNamespace(consumer=Consumer(position)),
        bulk=SimpleNamespace(pending=set()),
        flushed=0,
        asked=asked,
        persisted=persisted,
    )

    async def first_committed_record(tp: TP, start: int, end: int) -> int | None:
        asked.append((tp, start, end))
        if isinstance(answer, BaseException):
            raise answer
        return answer

    def flush_buffers() -> None:
        r.flushed += 1

    r.end_rule = EndRule(first_committed_record)
    r.flush_buffers = flush_buffers
    r.bulk_pending = lambda tp: TransactionalRecovery.bulk_pending(r, tp)
    return r


async def settle(r: Any, *, idle: bool) -> bool:
    ended: bool = await TransactionalRecovery.end_if_complete(r, CHANGELOG, idle=idle)
    return ended


async def test_nothing_committed_after_the_last_record_applied_ends_the_partition() -> None:
    r = recovery(applied=99, highwater=100, answer=None)
    assert await settle(r, idle=False)
    assert r.asked == [(CHANGELOG, 100, 101)]  # [after the last applied, last stable offset)
    assert r.flushed == 1  # the buffered records are applied before the offset is recorded
    assert r.persisted == {CHANGELOG: 100}  # the store holds the changelog through the end
    assert r.active_offsets[CHANGELOG] == 100  # nothing remaining


async def test_an_aborted_tail_ends_the_partition_after_an_idle_wait() -> None:
    r = recovery(applied=60, highwater=100, answer=None, position=101)
    assert await settle(r, idle=True)
    assert r.asked == [(CHANGELOG, 61, 101)] and r.active_offsets[CHANGELOG] == 100


async def test_a_consumer_at_the_end_does_not_end_a_partition_with_records_to_apply() -> None:
    """Issue 18: the position says what was fetched, not what was applied. Records fetched and
    never applied are read again from the record after the last one applied."""
    r = recovery(applied=-1, highwater=100_958, answer=0, position=100_959)
    assert not await settle(r, idle=True)
    assert r.flushed == 0 and r.persisted == {}
    assert r.active_offsets[CHANGELOG] == -1
    assert r.app.consumer.seeks == [(CHANGELOG, 0)]


async def test_a_partition_the_restorer_reads_is_left_to_it() -> None:
    """The restorer reads it in bulk: Faust's consumer was moved to its end and nothing goes
    through the queue, so after an idle wait it looks skipped. Reading it again would make
    Faust's consumer fetch the whole partition beside the restorer, for nothing."""
    r = recovery(applied=-1, highwater=100_958, answer=0, position=100_959)
    r.bulk.pending.add(CHANGELOG)
    assert not await settle(r, idle=True)
    assert r.asked == [] and r.app.consumer.seeks == []
    assert r.active_offsets[CHANGELOG] == -1


async def test_records_not_fetched_yet_are_waited_for() -> None:
    r = recovery(applied=40, highwater=100, answer=50, position=45)
    assert not await settle(r, idle=True)
    assert r.app.consumer.seeks == [] and r.active_offsets[CHANGELOG] == 40


async def test_a_record_still_to_come_after_the_one_before_the_end_is_waited_for() -> None:
    r = recovery(applied=99, highwater=100, answer=100, position=101)
    assert not await settle(r, idle=False)  # not idle: records may be on their way
    assert r.flushed == 0 and r.persisted == {} and r.app.consumer.seeks == []


@pytest.mark.parametrize("error", [TimeoutError("no answer"), OSError("refused")])
async def test_no_answer_from_the_broker_ends_nothing(error: Exception) -> None:
    r = recovery(applied=99, highwater=100, answer=error)
    assert not await settle(r, idle=True)
    assert r.flushed == 0 and r.persisted == {} and r.active_offsets[CHANGELOG] == 99


async def test_an_answer_made_stale_by_a_record_applied_meanwhile_ends_nothing() -> None:
    r = recovery(applied=60, highwater=100, answer=None)

    async def applied_meanwhile(tp: TP, start: int, end: int) -> int | None:
        r.active_offsets[tp] = 70
        return None

    r.end_rule = EndRule(applied_meanwhile)
    assert not await settle(r, idle=True)
    assert r.persisted == {} and r.active_offsets[CHANGELOG] == 70


@pytest.mark.parametrize(
    ("applied", "active"),
    [
        (100, True),  # at the end already
        (99, False),  # a standby partition (never ends) or one revoked
    ],
)
async def test_nothing_is_asked_when_there_is_nothing_to_end(applied: int, active: bool) -> None:
    r = recovery(applied=applied, highwater=100, answer=None)
    if not active:
        r.active_tps = set()
    assert not await settle(r, idle=True)
    assert r.asked == [] and r.persisted == {}


@pytest.mark.parametrize("ours", [True, False])
def test_resuming_the_flow_keeps_the_fetched_changelog_records(ours: bool) -> None:
    """Faust's queue is emptied at every resume of the app's flow, the last one right after the
    standby partitions began fetching: the records queued then were lost for good."""
    kwargs: dict[str, Any] = {"TableManager": TransactionalTableManager} if ours else {}
    app = faust.App(f"recovery-queue-{ours}", autodiscover=False, **kwargs)
    queue = app.tables.changelog_queue
    queue.put_nowait("a fetched changelog record")
    app.flow_control.resume()
    assert queue.qsize() == (1 if ours else 0)
    assert isinstance(app.tables.recovery, TransactionalRecovery) == ours


def test_a_failing_restore_is_retried_less_often_up_to_a_bound() -> None:
    backoff = Backoff("restoring x-0", limit=None)
    delays = [backoff.failed(OSError("refused")) for _ in range(9)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0, 30.0]
    backoff.reset()
    assert backoff.failed(OSError("refused")) == FIRST_SECONDS


def test_a_restore_failing_past_its_limit_gives_up_saying_what_it_waited_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [100.0]
    monkeypatch.setattr("recovery.retry.time.monotonic", lambda: now[0])
    backoff = Backoff("restoring app-seen_ids-changelog-2", limit=60)
    backoff.failed(OSError("refused"))
    now[0] += 59
    backoff.failed(OSError("refused"))  # within the limit: wait and try again
    now[0] += 1
    with pytest.raises(GaveUp) as gave_up:
        backoff.failed(OSError("refused"))
    message = str(gave_up.value)
    assert "restoring app-seen_ids-changelog-2" in message
    assert "3 times over 60s" in message and "OSError('refused')" in message
