"""The dedup loop: ``dedupe_batch``, which hands each batch of one partition's records from
``app.eos.Consumer`` to ``Deduplicator.handle_batch`` (``app/worker/dedup.py``) in its task's
transaction; and the ``dedupe_events`` agent, which only subscribes the source topics (no
record reaches it).

Every send and table write happens inside the record's task transaction (``app.eos``).
"""

from __future__ import annotations

import logging
from collections import Counter

import faust

from app.eos import BatchHandler, SourceRecord, TaskTransactionManager
from app.worker.dedup import Deduplicator

log = logging.getLogger(__name__)


def register_agents(app: faust.App, source: faust.TopicT) -> faust.types.AgentT:
    """Declare ``dedupe_events`` on ``app``: it subscribes the source topics for Faust's consumer.

    No record reaches it: ``app.eos.Consumer`` hands every source record to ``dedupe_batch``
    inside its task's transaction. One that did would be outside any transaction, so it stops
    the worker instead of being processed.
    """

    async def dedupe_events(stream: faust.StreamT[bytes]) -> None:
        async for event in stream.events():
            message = event.message
            raise RuntimeError(
                f"record {message.topic}-{message.partition}@{message.offset} reached the "
                "dedupe_events agent, outside any transaction: the consumer must hand source "
                "records to dedupe_batch"
            )

    agent: faust.types.AgentT = app.agent(source, name="dedupe_events", concurrency=1)(
        dedupe_events
    )
    return agent


def batch_handler(app: faust.App, dedup: Deduplicator) -> BatchHandler:
    """``dedupe_batch``: handles a batch of one partition's records handed over by
    ``app.eos.Consumer`` (without Faust's per-record stream machinery) in its task's
    transaction. Counts apply once the batch's records are in the transaction."""

    async def dedupe_batch(messages: list[SourceRecord], generation_id: int) -> None:
        transactions: TaskTransactionManager = app.consumer.transactions
        outcomes: Counter[str] = Counter()
        tally: Counter[tuple[str, str]] = Counter()
        async with transactions.processing_batch(messages, generation_id) as batch:
            if batch is None:
                return  # not our partition any more: its owner processes it
            await dedup.handle_batch(batch, messages, outcomes, tally)
        dedup.count(messages[0].partition, outcomes, tally)

    return dedupe_batch
