"""Faust's consumer, patched through the shims of ``adapters/faust_privates.py`` (the only
module naming Faust's private members; checked by tests/unit/adapters/test_private_names.py).

- :class:`ConsumerThread`: changelog highwaters asked from the broker, and the fetch wait from
  ``DEDUPE_FETCH_MAX_WAIT``.
- :class:`Consumer`: records of the source topics go to the app's batch handler, one call per
  fetched partition batch, instead of Faust's per-record stream.
- :class:`FaustAppHooks`: the app's transport and its hook once the agents are idle.
- :func:`request_rejoin` and :func:`records_held_back`: what the manager asks of Faust's
  consumer and app.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaConsumer
from faust.transport.consumer import CONSUMER_FETCHING
from faust.types import TP

from adapters import aiokafka_privates
from adapters.faust_privates import (
    AppShim,
    ConsumerShim,
    ConsumerThreadShim,
    consumer_thread,
    crash,
    stopped,
    worker_consumer,
)
from app.eos.batch import BatchHandler

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)

#: Records parsed per fetch call while a rebalance or recovery runs (about 0.1 s of parsing).
HELD_BACK_MAX_RECORDS = 10_000
#: Records parsed per fetch call in steady processing: more than one call gathers there as a
#: rule, so it rarely binds; it bounds a call made before a rebalance that parses after it
#: (about 0.5 s of parsing).
STEADY_MAX_RECORDS = 100_000


def request_rejoin(app: Any) -> None:
    """Ask the group coordinator for a rebalance, so failed tasks restart from committed
    offsets (our eager rebalance revokes every partition and seeks to committed offsets).
    Stops the worker when that cannot be asked."""
    try:
        thread = consumer_thread(app)
        consumer = worker_consumer(thread)
        thread.thread_loop.call_soon_threadsafe(aiokafka_privates.rejoin_request(consumer))
    except Exception as exc:  # pragma: no cover - depends on Faust internals
        log.critical("cannot request a rejoin (%r): stopping the worker", exc)
        crash(app, exc)


def records_held_back(app: Any) -> bool:
    """True while records are legitimately held back: a rebalance, recovery, paused flow."""
    return bool(
        getattr(app, "rebalancing", False)
        or getattr(app, "in_recovery", False)
        or not app.tables.recovery.completed.is_set()
        or not app.consumer.flow_active
    )


class FaustAppHooks(AppShim):
    """The Faust app's consumer hooks: the transport Faust builds (``transport_type``: our
    consumer and transaction manager); ``consumer_idle`` (the shim's hook) is awaited once the
    agents are idle."""

    transport_type: type

    def new_transport(self) -> Any:
        return self.transport_type(self.conf.broker_consumer, self)


class ConsumerThread(ConsumerThreadShim):
    """Faust's consumer thread, with highwaters that exist before the first fetch.

    Under exactly_once Faust takes a changelog's highwater from ``last_stable_offset``, which
    aiokafka only knows after a fetch response: at recovery start it is None, Faust reads it as
    -1 and crashes with ConsistencyError on any restart with local state. Ask the broker instead
    (ListOffsets with read_committed isolation returns the last stable offset).
    """

    def configure_consumer(self, consumer: AIOKafkaConsumer) -> None:
        """``fetch_max_wait_ms`` from ``DEDUPE_FETCH_MAX_WAIT`` instead of Faust's fixed 1,500 ms.

        aiokafka sends one fetch at a time to a broker and leaves out partitions whose fetched
        records are still buffered. Once the input partitions' records are buffered, the next
        fetch asks for the repartition topic alone, which has nothing new: the broker holds it
        for the whole wait, and the input partitions, drained meanwhile, wait with it
        (docs/design.md, "Fetches wait at most").
        """
        settings: EosSettings = self.app.dedupe_settings
        aiokafka_privates.set_fetch_max_wait(consumer, settings.fetch_max_wait)

    def max_records(self) -> int:
        """At most :data:`HELD_BACK_MAX_RECORDS` records parsed per fetch call while a
        rebalance or recovery runs, and :data:`STEADY_MAX_RECORDS` otherwise.

        Faust leaves ``max_poll_records`` unset, so one call parsed a whole fetch response. A
        rebalance gives every changelog partition a fetch position at its start until the
        recovery seeks it, and a call made before the rebalance waits through it and then
        parses what was fetched from there (read from aiokafka's code): in a standby takeover,
        megabytes of records of each changelog partition, parsed on this thread, which also
        sends the group's heartbeats, long enough for the session to expire and a second
        rebalance to follow. A small cap in steady processing costs throughput (the contender
        benchmark, ``make bench``); one above what a steady call gathers does not."""
        return HELD_BACK_MAX_RECORDS if records_held_back(self.app) else STEADY_MAX_RECORDS

    async def fetch_highwaters(self, partitions: list[TP]) -> Mapping[TP, int]:
        offsets: Mapping[TP, int] = await worker_consumer(self).end_offsets(partitions)
        return offsets


class Consumer(ConsumerShim):
    """Faust's aiokafka consumer, handing records of the source topics over in batches.

    Faust delivers each record on its own: into a channel queue (two tasks and an
    ``asyncio.wait`` per record), through the stream's iteration, acks and sensors, to the
    agent: per-record work this worker does not need. Records of the source topics skip it
    and go to the app's ``batch_handler``: each partition's records of one
    fetch go to the handler in one call (offset order, one partition per call, partitions one
    after another), taken from the fetcher's result directly (``_deliver``): Faust's
    ``getmany`` makes its flow, generation and highwater checks per record, here they run per
    partition per fetch. Everything else (changelog records during recovery, other topics) takes
    Faust's path. The handler is shielded: a stop that cancels the fetcher lets the batch
    finish (the stop's commit waits for it) instead of failing its transaction half-way.
    """

    def new_consumer_thread(self) -> ConsumerThread:
        return ConsumerThread(self, loop=self.loop, beacon=self.beacon)

    async def drain_messages(self, fetcher: Any) -> None:  # pragma: no cover - a worker loop
        batches = self.transactions.batch_handler(self.app.batch_handler)
        consumer_should_stop = stopped(self).is_set
        fetcher_should_stop = stopped(fetcher).is_set
        set_flag = self.diag.set_flag
        unset_flag = self.diag.unset_flag
        try:
            while not (consumer_should_stop() or fetcher_should_stop()):
                set_flag(CONSUMER_FETCHING)
                records, active = await self.wait_next_records(1.0)
                await self.sleep(0)
                if records is not None and not self.should_stop:
                    await self._deliver(records, active, batches)
                unset_flag(CONSUMER_FETCHING)
        except self.consumer_stopped_errors:
            if self.transport.app.should_stop:
                return
            raise
        except asyncio.CancelledError:
            if self.transport.app.should_stop:
                return
            raise
        finally:
            unset_flag(CONSUMER_FETCHING)

    async def _deliver(
        self, records: Mapping[TP, list[Any]], active: set[TP] | None, handler: BatchHandler
    ) -> None:
        """One fetch's records: what Faust's ``getmany`` and ``_drain_messages`` do per record
        (round-robin over topics, flow and generation checks, the highwater metric, the
        "DROPPED MESSAGE ROFF" check), done per partition, and the source topics' records
        handed to ``handler`` as one batch per partition.

        Re-implemented, not called, because Faust's loop yields one message object per record
        to one callback; held to its deliveries by tests/unit/app/eos/test_deliver_as_faust.py.
        """
        app = self.app
        if not self.flow_active:
            # Faust's getmany (even after an empty fetch): a rebalance began; go back to the
            # committed offsets.
            try:
                await self.perform_seek()
            except Exception as exc:
                self.log.warning(f"exception performing seek when flow not active {exc}")
            return
        generation_id = app.consumer_generation_id
        batch_topics = self.transactions.source_topics
        read_offset = self.read_offsets
        to_message = self.to_message
        for tp, fetched in records.items():
            if not fetched:
                continue
            if not self.flow_active or app.consumer_generation_id != generation_id:
                return  # what Faust's getmany does: the rest is fetched again
            if active is not None and tp not in active and tp not in self.buffered_partitions:
                continue
            highwater = self.highwater(tp)
            app.monitor.track_tp_end_offset(tp, highwater)
            r_offset = read_offset[tp]
            if tp.topic in batch_topics:
                messages = (
                    fetched
                    if r_offset is None or fetched[0].offset >= r_offset
                    else [record for record in fetched if record.offset >= r_offset]
                )
                if messages:
                    read_offset[tp] = messages[-1].offset
                    await asyncio.shield(handler(messages, generation_id))
                    if highwater is not None:
                        self.transactions.fetched(tp, highwater - messages[-1].offset - 1)
                continue
            for record in fetched:
                if r_offset is not None and record.offset < r_offset:
                    continue
                await self.wait_first(
                    self.callback(to_message(tp, record)), self.suspend_flow.wait()
                )
                read_offset[tp] = record.offset
