"""Exactly-once effects for Kafka consumers: idempotency claims on PostgreSQL, Redis or memory.

::

    from idempotent_consumer import Idempotency, PostgresStore

    idem = Idempotency(PostgresStore("postgresql://..."), processor="billing",
                       lease=timedelta(seconds=30), expire_after=timedelta(days=7))
    async with idem.claim(event_id, payload=record.value) as claim:
        if claim.done:                 # a repeat: the first run's result, nothing runs again
            return claim.result
        charge_id = await charge(...)
        claim.complete(charge_id)      # stored with the claim; an exception releases it

``PostgresStore`` needs the ``postgres`` extra, ``RedisStore`` the ``redis`` extra, the Kafka
loop (``idempotent_consumer.kafka``) the ``kafka`` extra; they are imported on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._base import (
    AlreadyInProgress,
    IdempotencyError,
    InvalidEventId,
    JsonSerializer,
    LeaseLost,
    NotSerializable,
    PayloadMismatch,
    Serializer,
    payload_hash,
)
from ._core import Claim, Idempotency
from ._sync import SyncClaim, SyncIdempotency
from .memory import MemoryStore, catch_rate, slots_for, window

if TYPE_CHECKING:
    from .postgres import PostgresStore
    from .redis_store import RedisStore

__all__ = [
    "AlreadyInProgress",
    "Claim",
    "Idempotency",
    "IdempotencyError",
    "InvalidEventId",
    "JsonSerializer",
    "LeaseLost",
    "MemoryStore",
    "NotSerializable",
    "PayloadMismatch",
    "PostgresStore",
    "RedisStore",
    "Serializer",
    "SyncClaim",
    "SyncIdempotency",
    "catch_rate",
    "payload_hash",
    "slots_for",
    "window",
]


def __getattr__(name: str) -> Any:
    # The backends' clients are optional extras: import them when first asked for.
    if name == "PostgresStore":
        from .postgres import PostgresStore

        return PostgresStore
    if name == "RedisStore":
        from .redis_store import RedisStore

        return RedisStore
    raise AttributeError(f"module 'idempotent_consumer' has no attribute {name!r}")
