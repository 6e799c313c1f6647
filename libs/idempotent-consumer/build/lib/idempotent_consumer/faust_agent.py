"""A helper for Faust agents: each event's effect once per event id and processor.

How to run (in a Faust app reading the clean topic)::

    from idempotent_consumer import PostgresStore
    from idempotent_consumer.faust_agent import idempotent_agent

    async def charge(value, claim):
        return await payments.charge(value)       # -> the charge id, cached with the claim

    app.agent(clean_topic, name="charge")(idempotent_agent(PostgresStore(dsn), charge))

The agent yields each event's result (the first run's, for a repeat). Faust acknowledges an
event when the agent takes the next one and commits acknowledged offsets, so an offset is
committed only after its claim completed. The processor namespace defaults to the app id,
which is Faust's consumer group: each group dedups on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any

from ._base import AsyncStore, Serializer
from ._core import Claim, Idempotency


def message_key(event: Any) -> str:
    """The default event id: the Kafka record's key, as sent (the pipeline keys by messageId)."""
    key = event.message.key
    if key is None:
        raise ValueError("event has no key: the event id must come from the producer")
    return key.decode() if isinstance(key, bytes) else str(key)


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
) -> Callable[[Any], AsyncIterator[Any]]:
    """An agent function: ``handler(value, claim)`` runs once per event id; a repeat yields
    the first result without calling it. ``payload(event)`` (default: the raw value bytes)
    is hashed for ``PayloadMismatch``."""

    def raw_value(event: Any) -> object:
        return event.message.value

    payload_of = payload or raw_value

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
            async with idem.claim(event_id(event), payload=payload_of(event), wait=True) as claim:
                if claim.done:
                    result = claim.result
                else:
                    result = await handler(event.value, claim)
                    claim.complete(result)
            yield result

    return agent
