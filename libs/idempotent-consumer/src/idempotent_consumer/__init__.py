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
``from idempotent_consumer import *`` works with no extra installed: a store is among its
names only when its client library is installed.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

from ._base import (
    AlreadyInProgress,
    EventId,
    IdempotencyError,
    InvalidEventId,
    JsonSerializer,
    LeaseLost,
    NotSerializable,
    PayloadMismatch,
    Serializer,
    StoredError,
    payload_hash,
)
from ._core import Claim, Idempotency, KeepAlive
from ._shared import Repeat
from ._sync import SyncClaim, SyncIdempotency, SyncKeepAlive
from .cache import CacheStats, LocalCache
from .decorators import (
    DISABLED_ENV,
    IdempotencyDisabledWarning,
    idempotent,
    idempotent_function,
)
from .memory import MemoryStore, catch_rate, slots_for, window

try:
    # pyproject.toml's version, as installed: the one place it is written
    __version__ = version("idempotent-consumer")
except PackageNotFoundError:  # imported from a source tree that was never installed
    __version__ = "0+unknown"

if TYPE_CHECKING:  # for type checkers; at run time __getattr__ imports them on first use
    from .postgres import PostgresStore as PostgresStore
    from .redis_store import RedisStore as RedisStore

__all__ = [
    "DISABLED_ENV",
    "AlreadyInProgress",
    "CacheStats",
    "Claim",
    "EventId",
    "Idempotency",
    "IdempotencyDisabledWarning",
    "IdempotencyError",
    "InvalidEventId",
    "JsonSerializer",
    "KeepAlive",
    "LeaseLost",
    "LocalCache",
    "MemoryStore",
    "NotSerializable",
    "PayloadMismatch",
    "Repeat",
    "Serializer",
    "StoredError",
    "SyncClaim",
    "SyncIdempotency",
    "SyncKeepAlive",
    "catch_rate",
    "idempotent",
    "idempotent_function",
    "payload_hash",
    "slots_for",
    "window",
]

#: The stores on optional extras: (module, the client library it needs, the extra).
_EXTRAS = {
    "PostgresStore": (".postgres", "psycopg", "postgres"),
    "RedisStore": (".redis_store", "redis", "redis"),
}
# Listed for `import *` only when importable: a name there that cannot be imported would
# make `from idempotent_consumer import *` fail for everyone without that extra.
__all__ += [name for name, (_, client, _) in _EXTRAS.items() if find_spec(client) is not None]


def __getattr__(name: str) -> Any:
    # The backends' clients are optional extras: import them when first asked for.
    if name not in _EXTRAS:
        raise AttributeError(f"module 'idempotent_consumer' has no attribute {name!r}")
    module, client, extra = _EXTRAS[name]
    if find_spec(client) is None:
        raise ImportError(
            f"{name} needs the {extra!r} extra: pip install 'idempotent-consumer[{extra}]'"
        )
    return getattr(importlib.import_module(module, __name__), name)
