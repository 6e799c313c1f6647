"""The Faust adapter of the recovery (``recovery/faust_adapter.py``): every active partition
short of its end goes to the restorer, with Faust's consumer moved to its end; a recovery ends
when the last restore reached its end, never on anything Faust's loop sees (issue 18: the
consumer's position says what was fetched, not what a store holds); Faust's queue is drained and
applies nothing. Whole recoveries on the real broker: tests/faults/test_recovery_takeover.py
(F16, F17) and tests/integration/test_age_out.py. The retry backoff and limit: the last two
tests."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import faust
import pytest
from aiokafka.structs import TopicPartition
from faust.types import TP

from recovery.bulk import BulkRestores
from recovery.faust_adapter import TransactionalRecovery, TransactionalTableManager
from recovery.follow import Follower
from recovery.restore import Restorer
from recovery.retry import FIRST_SECONDS, Backoff, GaveUp
from tables.transactional import TransactionalTable

A, B, C = (TP("app-seen_ids-changelog", p) for p in range(3))


class Unread:
    """A changelog reader these tests never reach."""

    async def fetch(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing is read here")

    async def close(self) -> None:
        pass


class Consumer:
    def __init__(self) -> None:
        self.seeks: list[dict[TP, int]] = []

    async def seek_wait(self, offsets: dict[TP, int]) -> None:
        self.seeks.append(dict(offsets))


class Table:
    """What Faust's own loop applies changelog records to."""

    recovery_buffer_size = standby_buffer_size = 1

    def __init__(self) -> None:
        self.applied: list[Any] = []

    async def on_changelog_event(self, event: Any) -> None:
        pass

    def apply_changelog_batch(self, events: list[Any]) -> None:
        self.applied.extend(events)


def recovery(name: str) -> tuple[TransactionalRecovery, BulkRestores]:
    """The recovery service of a new app, in a recovery of A (nothing restored yet), B (half)
    and C (its store at the end already)."""
    app = faust.App(name, autodiscover=False, TableManager=TransactionalTableManager)
    r = app.tables.recovery
    restores = BulkRestores(
        Restorer(Unread()),
        highwater=r.bulk_highwater,
        store=r.bulk_store,
        restored=r.bulk_restored,
    )
    r.use(restores, Follower(Unread()))
    r.active_tps.update({A, B, C})
    r.active_highwaters.update({A: 100, B: 50, C: 7})
    r.active_offsets.update({A: -1, B: 20, C: 7})
    r.tp_to_table.update(dict.fromkeys((A, B, C), Table()))
    r._set_recovery_started()
    return r, restores


async def test_each_partition_short_of_its_end_is_restored_and_faust_s_consumer_waits_at_it() -> (
    None
):
    r, restores = recovery("adapter-seek")
    consumer = Consumer()
    await r._seek_offsets(consumer, {A, B, C}, r.active_offsets, "active")
    assert restores.pending == {TopicPartition(*A), TopicPartition(*B)}
    # Faust's seek (to the offset each store holds), then the restored ones to their end.
    assert consumer.seeks == [{A: 0, B: 20, C: 7}, {A: 101, B: 51}]


async def test_a_recovery_ends_when_its_last_restore_reached_the_end() -> None:
    r, _restores = recovery("adapter-end")
    r.bulk_restored(TopicPartition(*A), 100)
    assert r.in_recovery and not r.signal_recovery_end.is_set()
    r.bulk_restored(TopicPartition(*B), 50)
    assert not r.in_recovery and r.signal_recovery_end.is_set()
    assert r.active_offsets == {A: 100, B: 50, C: 7}


async def test_faust_s_queue_is_drained_and_ends_nothing() -> None:
    """Records Faust's consumer queues, and idle waits of the queue, with the consumer at the
    end of partitions still restoring: Faust's own loop ended them there."""
    r, _restores = recovery("adapter-queue")
    queue = r.tables.changelog_queue
    for offset in (98, 99):
        message = SimpleNamespace(tp=A, offset=offset, key=b"k", value=b"v")
        queue.put_nowait(SimpleNamespace(message=message))
    loop = asyncio.ensure_future(TransactionalRecovery._slurp_changelogs(r))
    try:
        await asyncio.sleep(2.5)  # two of the loop's idle waits after the records
        assert queue.qsize() == 0
        assert r.in_recovery and not r.signal_recovery_end.is_set()
        assert r.active_offsets == {A: -1, B: 20, C: 7}
        assert r.tp_to_table[A].applied == []
    finally:
        loop.cancel()
        with pytest.raises(asyncio.CancelledError):
            await loop


def test_only_a_table_the_restorer_writes_is_accepted() -> None:
    """Every partition is read by the restorer or the follower: a table whose store they
    cannot write would never be restored."""
    app = faust.App("adapter-tables", autodiscover=False, TableManager=TransactionalTableManager)
    with pytest.raises(TypeError, match="only restores TransactionalTable"):
        app.Table("plain", default=None)
    table = TransactionalTable(app, name="ours")
    assert app.tables.add(table) is table


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
