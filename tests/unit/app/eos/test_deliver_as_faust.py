"""``Consumer._deliver`` (app/eos/consumer.py) against Faust's own delivery: Faust's ``getmany``
and ``_drain_messages``, run on the same fetch, deliver the same records of each partition in
the same order, skip the same ones (behind the read offset, of a partition neither active nor
buffered, all of them when the flow is stopped, after which both seek) and report the same
highwaters. Ours hands a source topic's records on as one batch per partition; Faust's
round-robins record by record, so the order across partitions and where a new generation cuts
the delivery (a record, or a partition) differ by design.

Both consumers are the real classes on a worker's app (no broker: nothing is started), run on
their service's event loop (mode's waits are bound to it); only the fetch, the highwater and
the callbacks are stand-ins.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.structs import ConsumerRecord
from faust.transport.drivers.aiokafka import Consumer as FaustConsumer
from faust.types import TP
from mode.utils.locks import Event

from app.eos.consumer import Consumer
from app.settings import Settings

SOURCE, OTHER = "events-in", "side-topic"
S0, S1, O0 = TP(SOURCE, 0), TP(SOURCE, 1), TP(OTHER, 0)

Delivered = dict[TP, list[int]]


def records(tp: TP, *offsets: int) -> list[ConsumerRecord[bytes, bytes]]:
    return [
        ConsumerRecord(
            tp.topic, tp.partition, o, 1_700_000_000_000 + o, 0, b"k", b"v", None, 1, 1, ()
        )
        for o in offsets
    ]


FETCH: Mapping[TP, list[Any]] = {
    S0: records(S0, 10, 11, 12, 13),
    S1: records(S1, 5, 6, 7),
    O0: records(O0, 40, 41),
}


def consumers(tmp_path: Path) -> tuple[Consumer, FaustConsumer]:
    """Ours (the worker's transport makes it) and Faust's aiokafka consumer on the same app."""
    from app.worker.factory import create_app

    app = create_app(Settings.from_env({"DEDUPE_DATA_DIR": str(tmp_path)})).app
    transport = app._new_transport()
    kwargs: dict[str, Any] = {
        "callback": lambda message: None,  # replaced by prepare()
        "on_partitions_revoked": None,
        "on_partitions_assigned": None,
    }
    ours = transport.create_consumer(**kwargs)
    faust_own = FaustConsumer(transport, **kwargs)
    assert type(ours) is Consumer
    return ours, faust_own


def prepare(
    consumer: Any,
    state: dict[str, Any],
    delivered: Delivered,
    seeks: list[str],
    tracked: set[TP],
    on_delivery: Callable[[], None],
) -> None:
    """The same stand-ins on either consumer: the fetch, the highwater, the callback, the seek,
    the read offsets, the buffered partitions and the flow."""
    consumer.highwater = lambda tp: 100 + tp.partition
    consumer.app.monitor = SimpleNamespace(track_tp_end_offset=lambda tp, hw: tracked.add(tp))

    async def callback(message: Any) -> None:
        delivered[message.tp].append(message.offset)
        on_delivery()

    async def perform_seek() -> None:
        seeks.append("seek")

    consumer.callback = callback
    consumer.perform_seek = perform_seek
    consumer._read_offset.update(state.get("read", {}))
    consumer._buffered_partitions.update(state.get("buffered", set()))
    if state.get("flow_stopped"):
        consumer.stop_flow()


def deliver(
    consumer: Any,
    state: dict[str, Any],
    on_delivery: Callable[[], None] = lambda: None,
    lags: dict[TP, int] | None = None,
) -> tuple[Delivered, list[str], set[TP]]:
    """One fetch through ``consumer``: ours by ``_deliver`` (a source topic's records as one
    batch per partition, the rest to the callback), Faust's by its ``_drain_messages``. What
    each partition got, the seeks, the partitions whose highwater was reported; ``lags`` gets
    what ours told the manager each batch's fetch left at the broker."""
    delivered: Delivered = defaultdict(list)
    seeks: list[str] = []
    tracked: set[TP] = set()
    prepare(consumer, state, delivered, seeks, tracked, on_delivery)
    active = state.get("active")
    if isinstance(consumer, Consumer):

        async def handler(batch: list[Any], generation_id: int) -> None:
            delivered[TP(batch[0].topic, batch[0].partition)].extend(r.offset for r in batch)
            on_delivery()

        told = lags if lags is not None else {}
        consumer.transactions = SimpleNamespace(
            source_topics=frozenset({SOURCE}), fetched=told.__setitem__
        )
        consumer.loop.run_until_complete(consumer._deliver(FETCH, active, handler))
    else:
        consumer.loop.run_until_complete(run_faust(consumer, active))
    return dict(delivered), seeks, tracked


async def run_faust(consumer: FaustConsumer, active: set[TP] | None) -> None:
    """Faust's ``_drain_messages`` loop for one fetch: the fetcher stops after it."""
    fetcher = SimpleNamespace(_stopped=Event())
    fetches = [(FETCH, active)]

    async def wait_next_records(timeout: float) -> Any:
        fetcher._stopped.set()
        return fetches.pop() if fetches else (None, None)

    consumer._wait_next_records = wait_next_records
    await consumer._drain_messages(fetcher)


CASES = {
    "all-new": {},
    "behind-read-offset": {"read": {S0: 12, O0: 41}},
    "inactive-not-buffered": {"active": {S0, O0}},
    "inactive-but-buffered": {"active": {S0}, "buffered": {S1}},
    "flow-stopped": {"flow_stopped": True},
}


@pytest.mark.parametrize("case", CASES)
def test_each_partition_gets_what_faust_delivers(case: str, tmp_path: Path) -> None:
    ours, faust_own = consumers(tmp_path)
    got = deliver(ours, CASES[case])
    assert got == deliver(faust_own, CASES[case])
    read_after = {tp: o for tp, o in ours._read_offset.items() if o is not None}
    assert read_after == {tp: o for tp, o in faust_own._read_offset.items() if o is not None}
    if case == "all-new":  # the comparison compares something
        assert got[0] == {tp: [r.offset for r in rs] for tp, rs in FETCH.items()}
    if case == "flow-stopped":
        assert got == ({}, ["seek"], set())


def test_each_batch_tells_the_manager_what_its_fetch_left_at_the_broker(tmp_path: Path) -> None:
    """The commit loop's pace follows it (``TaskTransactionManager._commit_loop``): the
    highwater (under exactly-once the last stable offset) less the offset after the batch."""
    ours, _ = consumers(tmp_path)
    lags: dict[TP, int] = {}
    deliver(ours, {}, lags=lags)
    assert lags == {S0: 100 - 14, S1: 101 - 8}  # the other topic's records are not a batch


def test_a_new_generation_stops_both_before_the_next_partition(tmp_path: Path) -> None:
    """The generation changes with the first record delivered: Faust stops at the next record,
    ours at the next partition (the batch in hand is one unit); neither starts another one."""
    got: dict[str, Delivered] = {}
    for name, consumer in zip(("ours", "faust"), consumers(tmp_path), strict=True):
        app = consumer.app
        app.consumer_generation_id = 1

        def rebalanced(app: Any = app) -> None:
            app.consumer_generation_id = 2

        got[name] = deliver(consumer, {}, rebalanced)[0]
    assert got["faust"] == {S0: [10]}
    assert got["ours"] == {S0: [10, 11, 12, 13]}
