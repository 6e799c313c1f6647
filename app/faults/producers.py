"""The fault tests' client supplier: the tasks' producers with the ``stored``, ``sent``,
``commit`` and ``committed`` points of ``DEDUPE_FAULT_INJECTION`` (``app/faults/injection.py``
parses the plan and documents each point and action).

As Kafka Streams' tests hand the streams instance a ``MockProducer`` through a
``KafkaClientSupplier`` (apache/kafka ``streams/src/main/java/org/apache/kafka/streams/
KafkaClientSupplier.java``, ``streams/src/test/java/org/apache/kafka/test/
MockClientSupplier.java``, ``clients/src/main/java/org/apache/kafka/clients/producer/
MockProducer.java``, whose ``commitTransaction`` throws what the test set), the factory hands
the worker :class:`FaultProducers` instead of ``app.eos.producer.TransactionalProducers`` when
the variable is set. The worker's code calls its producer as it does in production; nothing
in ``app/eos/commit.py`` or the record's send path knows a fault. Production never imports
this module: its supplier makes the plain clients, so it pays for no seam.

- :class:`FaultProducer` is aiokafka's producer with :class:`CommitFaults` mixed in:
  ``commit_transaction`` acts at the ``commit`` point (kill, term, pause, lose-request,
  lose-response, roll-back) and reaches ``committed`` once the real commit returned. A
  subclass, not a proxy: the worker reaches aiokafka's transaction state and sender through
  the producer object itself (``adapters/aiokafka_privates.py``, ``app/eos/txn_v2.py``), and
  those stay the real ones; the unit tests mix the same class into their fake producer. Only
  a transaction whose consumed offsets joined it (``send_offsets_to_transaction``) is a task's
  commit, the point's meaning; a record-less one (``app/eos/hanging.py``'s markers) passes
  through without reaching a point.
- ``stored`` and ``sent``: an output record never passes a producer method of its own. The
  task's :class:`~app.eos.collector.RecordCollector` appends it to a batch it builds, and hands
  the producer whole batches at the commit (``collector.py`` says why). So this supplier also
  makes the tasks' collectors (:class:`WatchedCollector`), whose batches of the output topic,
  and only those, are :class:`WatchedBatch`: ``stored`` before the record's append, ``sent``
  once it is in the batch, the open transaction's. Changelog batches (their own factory) and
  the source offsets' record (``producer.send``) are never watched, so ``sent`` still means the
  output is in the transaction and its changelog record not yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiokafka import AIOKafkaProducer
from aiokafka.structs import TopicPartition

from app.eos.collector import RecordCollector, retrieve_exception_later
from app.eos.producer import TransactionalProducers, abandon

if TYPE_CHECKING:
    from app.faults.injection import FaultPlan
    from app.settings import Settings

log = logging.getLogger(__name__)

#: How long the ``pause`` action holds a commit request (within the commit's timeout,
#: ``DEDUPE_COMMIT_TIMEOUT``, 30 s unless set).
PAUSE_SECONDS = 5.0
#: ``lose-response``: how long the request is out before its answer counts as lost (the broker
#: answers meanwhile).
ANSWERED_WITHIN = 0.5


if TYPE_CHECKING:
    _Producer = AIOKafkaProducer
else:
    _Producer = object


class CommitFaults(_Producer):  # type: ignore[misc,valid-type]
    """Mixed in before a producer class: its commit acts at the ``commit`` and ``committed``
    points of ``plan`` (``partition``: its task's)."""

    def __init__(self, plan: FaultPlan, partition: int, **config: Any) -> None:
        super().__init__(**config)
        self.plan = plan
        self.partition = partition
        #: The consumed offsets of the open transaction (None: none joined it yet).
        self.joined_offsets: dict[TopicPartition, int] | None = None

    async def send_offsets_to_transaction(
        self, offsets: Mapping[TopicPartition, int], group_id: str
    ) -> None:
        await super().send_offsets_to_transaction(offsets, group_id)
        self.joined_offsets = dict(offsets)

    async def abort_transaction(self) -> None:
        self.joined_offsets = None
        await super().abort_transaction()

    async def commit_transaction(self) -> None:
        offsets, self.joined_offsets = self.joined_offsets, None
        if offsets is None:  # no task's commit: a record-less transaction
            await super().commit_transaction()
            return
        action = self.plan.reach("commit")  # kill and term act here
        if action == "pause":
            await asyncio.sleep(PAUSE_SECONDS)
        elif action == "lose-request":
            raise TimeoutError("fault injection: commit request lost")
        elif action == "roll-back":
            await super().abort_transaction()
            self.plan.rolled_back = self.partition  # the kill follows once the stores applied it
            log.warning(
                "fault injection: partition %d's transaction (offsets %s) was aborted; "
                "reporting it committed (a commit the broker acknowledged, then rolled back)",
                self.partition,
                {f"{tp.topic}-{tp.partition}": off for tp, off in sorted(offsets.items())},
            )
            return
        elif action == "lose-response":
            request = asyncio.ensure_future(super().commit_transaction())
            await asyncio.sleep(ANSWERED_WITHIN)
            retrieve_exception_later(request)
            abandon(request)
            raise TimeoutError("fault injection: commit response lost")
        await super().commit_transaction()
        self.plan.reach("committed")


class FaultProducer(CommitFaults, AIOKafkaProducer):  # type: ignore[misc]
    """A task's aiokafka producer with :class:`CommitFaults`."""


class WatchedBatch:
    """A batch of the output topic whose appends reach ``stored`` and ``sent``; everything else
    is the real batch's (the producer sends the real one's bytes)."""

    def __init__(self, batch: Any, collector: WatchedCollector) -> None:
        self._batch = batch
        self._collector = collector

    def append(self, **record: Any) -> Any:
        collector = self._collector
        # A full batch refuses the record, and the collector appends it to a new one: that is
        # still one record's send, so ``stored`` counts it once.
        if not collector.storing:
            collector.storing = True
            collector.plan.reach("stored")
        appended = self._batch.append(**record)
        if appended is not None:
            collector.storing = False
            collector.plan.reach("sent")
        return appended

    def __getattr__(self, name: str) -> Any:
        return getattr(self._batch, name)


class WatchedCollector(RecordCollector):
    """A task's collector whose batches of ``output_topic`` are :class:`WatchedBatch`."""

    __slots__ = ("output_topic", "plan", "storing")

    def __init__(
        self, plan: FaultPlan, output_topic: str, output_batch: Callable[[], Any] | None = None
    ) -> None:
        super().__init__(output_batch)
        self.plan = plan
        self.output_topic = output_topic
        #: ``stored`` was reached for a record not in a batch yet.
        self.storing = False

    def _new_batch(self, producer: AIOKafkaProducer, tp: TopicPartition) -> Any:
        batch = super()._new_batch(producer, tp)
        return WatchedBatch(batch, self) if tp.topic == self.output_topic else batch


class FaultProducers(TransactionalProducers):
    """The worker's client supplier with ``plan``'s producers and collectors."""

    def __init__(
        self, plan: FaultPlan, settings: Settings, should_stop: Callable[[], bool]
    ) -> None:
        super().__init__(settings, should_stop)
        self.plan = plan

    def create(self, partition: int, **config: Any) -> AIOKafkaProducer:
        return FaultProducer(self.plan, partition, **config)

    def collector(self) -> RecordCollector:
        return WatchedCollector(self.plan, self.settings.output_topic, self.output_batch)
