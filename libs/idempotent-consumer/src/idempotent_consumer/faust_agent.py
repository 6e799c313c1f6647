"""A helper for Faust agents: each event's effect once per event id and processor.

How to run (in a Faust app reading the clean topic)::

    from idempotent_consumer import PostgresStore
    from idempotent_consumer.faust_agent import idempotent_agent
    from idempotent_consumer.kafka import DeadLetterPublisher, ErrorPolicy

    async def charge(value, claim):
        return await payments.charge(value)       # -> the charge id, cached with the claim

    dead_letters = DeadLetterPublisher(producer, group_id=app.conf.id)  # a started producer
    app.agent(clean_topic, name="charge")(idempotent_agent(
        PostgresStore(dsn), charge, errors=ErrorPolicy(recoverer=dead_letters)))

The agent yields each event's result (the first run's, or what ``on_repeat`` returns, for a
repeat; None for an event handed to the recoverer). Faust acknowledges an event when the
agent takes the next one and commits acknowledged offsets, so an offset is committed only
after its claim completed, or after the recoverer returned. The processor namespace
defaults to the app id, which is Faust's consumer group: each group dedups on its own.

Errors go through the same :class:`~idempotent_consumer.kafka.ErrorPolicy` as
``IdempotentConsumer``'s: retries with back-off, then the recoverer, which gets the event's
Kafka record as an aiokafka ``ConsumerRecord`` (so a ``DeadLetterPublisher`` writes the raw
key, value and headers); with no recoverer the error propagates after the retries and the
agent crashes (before 1.1 it did at the first error). ``AlreadyInProgress`` (a claim of the
handler's own found its id held) is waited out, not counted against ``retries``: an agent
cannot hand its event back to be read again, so past ``in_progress_wait`` it logs a warning
and waits on, as its own claim of the event (``wait=True``) waits for a holder until the
holder completes or its lease ends.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import timedelta
from typing import Any

from aiokafka import ConsumerRecord

from ._base import AsyncStore, InvalidEventId, Serializer
from ._core import Claim, Idempotency
from ._shared import Repeat, one_argument
from .kafka import ConsumerStats, ErrorPolicy, _handle_record, _run_claimed


def message_key(event: Any) -> str:
    """The default event id: the Kafka record's key, as sent (the pipeline keys by messageId)."""
    key = event.message.key
    if key is None:
        raise InvalidEventId("event has no key: the event id must come from the producer")
    return key.decode() if isinstance(key, bytes) else str(key)


def kafka_record(message: Any) -> ConsumerRecord[Any, Any]:
    """A Faust message as the aiokafka record it was read from: what ``on_repeat`` (as
    ``repeat.record``) and the recoverer get, the same shape as ``IdempotentConsumer``'s.
    Faust keeps the timestamp in seconds; Kafka's (and the dead-letter headers') is in ms."""
    headers = message.headers
    if isinstance(headers, Mapping):
        headers = list(headers.items())
    return ConsumerRecord(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        timestamp=round(message.timestamp * 1000) if message.timestamp is not None else -1,
        timestamp_type=message.timestamp_type,
        key=message.key,
        value=message.value,
        checksum=None,
        serialized_key_size=message.serialized_key_size,
        serialized_value_size=message.serialized_value_size,
        headers=[(k, v) for k, v in headers or ()],
    )


async def _sleep(seconds: float) -> bool:
    # Faust cancels the agent on a rebalance or stop: the sleep ends then, with it.
    await asyncio.sleep(seconds)
    return True


def idempotent_agent(
    store: AsyncStore,
    handler: Callable[[Any, Claim], Awaitable[Any]],
    *,
    processor: str | None = None,
    lease: timedelta = timedelta(seconds=30),
    expire_after: timedelta = timedelta(days=7),
    serializer: Serializer | None = None,
    event_id: Callable[[Any], str] = message_key,
    payload: Callable[[Any], object] | None = None,
    on_repeat: Callable[[Repeat], Any] | None = None,
    errors: ErrorPolicy | None = None,
    stats: ConsumerStats | None = None,
) -> Callable[[Any], AsyncIterator[Any]]:
    """An agent function: ``handler(value, claim)`` runs once per event id; a repeat yields
    the first result without calling it. ``payload(event)`` (default: the raw value bytes)
    is hashed for ``PayloadMismatch``. The claim completes with the handler's return value,
    unless the handler completed it itself (``claim.complete`` or ``claim.complete_error``).

    ``on_repeat(repeat: Repeat)``: called on a repeat (``repeat.record`` is the event's Kafka
    record); what it returns (awaited if awaitable) is what the agent yields, as with
    ``IdempotentConsumer`` and the decorators. ``errors``: the :class:`ErrorPolicy` (default:
    two more tries, then the error propagates). ``stats``: counters to update, as
    ``IdempotentConsumer.stats``."""
    if on_repeat is not None and not one_argument(on_repeat):
        raise TypeError("on_repeat takes one argument, a Repeat (repeat.result, repeat.record)")

    def raw_value(event: Any) -> object:
        return event.message.value

    payload_of = payload or raw_value
    policy = errors or ErrorPolicy()
    counters = stats if stats is not None else ConsumerStats()

    async def one_try(idem: Idempotency, event: Any, record: ConsumerRecord[Any, Any]) -> Any:
        async def handle(claim: Claim) -> Any:
            return await handler(event.value, claim)

        # the id and the payload are read inside the try: a record with no usable id is
        # the policy's to hand to the recoverer
        claiming = idem.claim(event_id(event), payload=payload_of(event), wait=True)
        return await _run_claimed(claiming, record, handle, on_repeat, counters)

    async def agent(stream: Any) -> AsyncIterator[Any]:
        idem: Idempotency | None = None
        async for event in stream.events():
            if idem is None:
                idem = Idempotency(
                    store,
                    processor or str(stream.app.conf.id),
                    lease=lease,
                    expire_after=expire_after,
                    serializer=serializer,
                )
            record = kafka_record(event.message)
            attempt = functools.partial(one_try, idem, event, record)
            _, result = await _handle_record(
                policy, record, attempt, _sleep, counters, hand_back=False
            )
            yield result

    return agent
