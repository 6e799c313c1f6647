"""End a transaction the broker left open on a task's own changelog partition (a hanging
transaction), by committing through it.

How one comes about: a broker's controlled shutdown leaves its partitions without a leader;
a transaction coordinator finishing a commit (or a rollback) at that moment finds no leader to
write the markers to, skips them as "likely deleted" and records the transaction as finished
(the flaw named in review of KAFKA-5202). The records stay without a marker, the partition's
last stable offset stays where they begin, and every read_committed reader stops there: left
alone, the worker's recovery would wait on it for good (fault row F8c).

Only task ``p``'s transactional id writes changelog partition ``p``, and when the partition is
assigned its producer has no transaction open and the broker has finished every earlier one of
that id: a new producer's ``InitProducerId`` completes or aborts them (markers written) before
it answers, and a kept one committed at the revoke. So a transaction still open there a
transaction timeout later is one the coordinator forgot: no marker will ever come from it.

Who holds it open decides how it ends (the partition leader's DescribeProducers, KIP-664):

- the task's own producer id: a transaction with no record that adds the changelog partition
  and every partition the task writes (clean, dead-letter and repartition topics) commits; its
  markers, of a newer epoch of the same producer id, end what that id left open on each of
  them (fault row F8c). A record-less transaction only exists in the old flow (AddPartitionsToTxn
  adds a partition without a record; under transactions v2 only a record does), so a v2 task
  runs it in a producer session of its own on the old flow, which every cluster accepts: the
  v2 producer is closed first and started again after, each session speaking one protocol, as
  the Java client moves between them only across an epoch bump;
- an older producer id of the same transactional id: under transactions v2 every commit bumps
  the epoch, and when it runs out the coordinator hands out a new producer id (KIP-890), after
  which no producer of the transactional id can write markers for the old one. Only markers
  written for it can end its transaction: WriteTxnMarkers to each partition's leader, with the
  old id, its epoch and coordinator epoch there (what ``kafka-transactions.sh abort``,
  ``Admin.abortTransaction``, writes), here a commit. The broker allows it to a principal with
  Alter on the cluster; without it the worker logs what to grant and keeps waiting.

Why commit, whatever the coordinator had decided: the forgotten transaction's records then
count on every partition that still holds them open, together. Its changelog records put its
ids in the store (the recovery replays them), so when the group's offsets do not hold the
transaction its records are read again and dropped as repeats, and its clean records are the
only copies. Aborting instead would lose the ids of a transaction whose clean records already
committed elsewhere (a cluster that wrote some markers), and forward those events twice.

Left open: a crash between adding the partitions and the commit leaves the coordinator to abort
this transaction, which ends the forgotten one as aborted, on the same partitions together.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from aiokafka.client import AIOKafkaClient
from aiokafka.errors import KafkaError
from aiokafka.structs import TopicPartition

from app.eos.producer import (
    TransactionalProducers,
    commit_markers,
    producer_id_and_epoch,
)
from app.eos.task import Task, TaskState
from app.eos.txn_messages import DescribeProducers, WriteTxnMarkers
from app.eos.txn_v2 import is_v2

if TYPE_CHECKING:
    from app.eos.settings import EosSettings

log = logging.getLogger(__name__)

#: Kafka error codes of DescribeProducers and WriteTxnMarkers that the repair reads.
TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED = 29, 31


def written_by(
    partition: int, changelogs: Iterable[str], sinks: Iterable[str], partitions: int
) -> list[TopicPartition]:
    """Every partition task ``partition``'s transactions may write: its partition of each
    changelog topic, and every partition (of ``partitions``) of the topics it forwards to."""
    return [TopicPartition(t, partition) for t in changelogs] + [
        TopicPartition(t, q) for t in sinks for q in range(partitions)
    ]


@dataclass(frozen=True)
class OpenTransaction:
    """A producer's transaction open on a partition, as its leader describes it."""

    tp: TopicPartition
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    #: The offset of its first record (the partition's last stable offset stops there).
    start_offset: int


class MarkersRefused(RuntimeError):
    """The broker refused to write markers for an older producer id (no Alter on the
    cluster): the message says what to grant."""


class Markers(Protocol):
    """The partition leaders' side of the repair (:class:`BrokerMarkers`)."""

    async def open_transactions(self, tps: list[TopicPartition]) -> list[OpenTransaction]:
        """The transactions open on ``tps`` (partitions the principal may not read: none)."""
        ...

    async def commit(self, transactions: list[OpenTransaction]) -> None:
        """Write a commit marker ending each of ``transactions`` (:class:`MarkersRefused`
        when the broker does not allow it)."""
        ...


class BrokerMarkers:
    """:class:`Markers` on the cluster: DescribeProducers and WriteTxnMarkers sent to each
    partition's leader (a client of its own, opened for one repair)."""

    def __init__(self, settings: EosSettings) -> None:
        self.settings = settings

    def _client(self) -> AIOKafkaClient:
        return AIOKafkaClient(
            bootstrap_servers=self.settings.bootstrap_servers,
            client_id=f"{self.settings.app_id}-hanging-repair",
            **self.settings.kafka_client_kwargs(),
        )

    @staticmethod
    async def _by_leader(
        client: AIOKafkaClient, tps: Iterable[TopicPartition]
    ) -> dict[int, list[TopicPartition]]:
        for topic in sorted({tp.topic for tp in tps}):
            await client.add_topic(topic)
        await client.force_metadata_update()
        leaders: dict[int, list[TopicPartition]] = {}
        for tp in tps:
            node = client.cluster.leader_for_partition(tp)
            if node is None or node < 0:
                raise KafkaError(f"no leader known for {tp.topic}-{tp.partition}")
            leaders.setdefault(node, []).append(tp)
        return leaders

    async def open_transactions(self, tps: list[TopicPartition]) -> list[OpenTransaction]:
        client = self._client()
        try:
            await client.bootstrap()
            found: list[OpenTransaction] = []
            denied: set[str] = set()
            for node, led in (await self._by_leader(client, tps)).items():
                response = await client.send(node, DescribeProducers(led))
                for topic, partitions, _ in response.topics:
                    for index, error, message, producers, _t in partitions:
                        if error == TOPIC_AUTHORIZATION_FAILED:
                            denied.add(topic)
                        elif error:
                            raise KafkaError(
                                f"DescribeProducers {topic}-{index}: error {error} {message or ''}"
                            )
                        found += [
                            OpenTransaction(TopicPartition(topic, index), pid, epoch, coord, start)
                            for pid, epoch, _seq, _ts, coord, start, _ in producers
                            if start >= 0
                        ]
            if denied:
                log.warning(
                    "cannot look for open transactions on %s (no Read on them); only the "
                    "others are repaired",
                    ", ".join(sorted(denied)),
                )
            return found
        finally:
            await client.close()

    async def commit(self, transactions: list[OpenTransaction]) -> None:
        client = self._client()
        try:
            await client.bootstrap()
            leaders = await self._by_leader(client, [t.tp for t in transactions])
            for node, led in leaders.items():
                for t in (t for t in transactions if t.tp in led):
                    request = WriteTxnMarkers(
                        t.producer_id, t.producer_epoch, True, t.coordinator_epoch, [t.tp]
                    )
                    response = await client.send(node, request)
                    codes = [
                        code
                        for _pid, topics, _ in response.markers
                        for _name, parts, _t in topics
                        for _index, code, _tt in parts
                    ]
                    if CLUSTER_AUTHORIZATION_FAILED in codes:
                        raise MarkersRefused(
                            f"the broker refused to write a marker for producer id "
                            f"{t.producer_id} on {t.tp.topic}-{t.tp.partition} (no Alter on the "
                            "cluster for this principal)"
                        )
                    if any(codes):
                        raise KafkaError(
                            f"WriteTxnMarkers for producer id {t.producer_id} on "
                            f"{t.tp.topic}-{t.tp.partition}: error {codes}"
                        )
        finally:
            await client.close()


class HangingTransactions:
    """Ends the hanging transactions of tasks' changelog partitions (the module docstring)."""

    def __init__(
        self,
        producers: TransactionalProducers,
        markers: Markers,
        written_by: Callable[[int], list[TopicPartition]],
        failed: Callable[[Task, BaseException], object],
    ) -> None:
        self.producers = producers
        self.markers = markers
        self._written_by = written_by
        self._failed = failed

    async def commit_through(
        self, tasks: Mapping[int, Task], hanging: list[TopicPartition]
    ) -> list[int]:
        """Commit through the ``hanging`` changelog partitions and what their transactions
        wrote; a task whose repair fails is reported to ``failed``. Returns the partitions
        committed through."""
        done = []
        for p in sorted({tp.partition for tp in hanging}):
            task = tasks.get(p)
            if task is None:
                continue
            async with task.lock:
                if task.state is not TaskState.RUNNING or task.producer is None:
                    continue
                if task.in_transaction:
                    continue  # records flow already: its commit writes the markers
                open_here = [tp for tp in hanging if tp.partition == p]
                try:
                    await self._end(task, open_here)
                except MarkersRefused as exc:
                    log.error(
                        "partition %d: %s. It is an older producer id of transactional id %s "
                        "(under transactions v2 every commit bumps the epoch, and when it runs "
                        "out the coordinator hands out a new id), and only markers written for "
                        "it can end its transaction now. Grant this principal Alter on the "
                        "cluster and restart the worker, which then commits it through "
                        "(docs/operations.md, a hanging transaction); still waiting",
                        p,
                        exc,
                        task.transactional_id,
                    )
                    continue
                except Exception as exc:
                    self._failed(task, exc)
                    continue
                done.append(p)
        return done

    async def _end(self, task: Task, open_here: list[TopicPartition]) -> None:
        assert task.producer is not None
        own_id, _epoch = producer_id_and_epoch(task.producer)
        holders = await self.markers.open_transactions(open_here)
        older = sorted({t.producer_id for t in holders} - {own_id})
        described = ", ".join(
            f"{t.tp.topic}-{t.tp.partition} (producer id {t.producer_id}, epoch "
            f"{t.producer_epoch}, from offset {t.start_offset})"
            for t in holders
        ) or ", ".join(f"{tp.topic}-{tp.partition}" for tp in open_here)
        log.error(
            "partition %d: a transaction stays open on %s after this partition's producer "
            "(transactional id %s, producer id %d) started, which finishes every transaction "
            "the broker still knows: the broker dropped its markers (a hanging transaction, "
            "e.g. after a single broker's restart). Committing through it on every partition "
            "the task writes (docs/operations.md, a hanging transaction)",
            task.partition,
            described,
            task.transactional_id,
            own_id,
        )
        written = sorted({*open_here, *self._written_by(task.partition)})
        if not holders or own_id in {t.producer_id for t in holders}:
            await self._commit_own(task, written)
        if older:
            elsewhere = await self.markers.open_transactions(written)
            ending = [t for t in elsewhere if t.producer_id in older]
            await self.markers.commit(ending)
            for pid in older:
                log.warning(
                    "partition %d: wrote commit markers for the older producer id %d on %s",
                    task.partition,
                    pid,
                    ", ".join(
                        f"{t.tp.topic}-{t.tp.partition}" for t in ending if t.producer_id == pid
                    ),
                )

    async def _commit_own(self, task: Task, written: list[TopicPartition]) -> None:
        """A record-less commit of the task's own producer id on ``written``."""
        producer = task.producer
        assert producer is not None
        if not is_v2(producer):
            await commit_markers(producer, written)
            return
        # Its own session on the old flow (the module docstring).
        await self.producers.close(producer)
        task.producer = None
        session = self.producers.new(task.partition, old_flow=True)
        try:
            await session.start()
            await commit_markers(session, written)
        finally:
            await self.producers.close(session)
            task.producer = await self.producers.start(task.partition)
