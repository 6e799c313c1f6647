"""What every store shares: the claim request and reply, errors, payload hashes, serializers.

A store does one atomic step per call and knows nothing of waiting or context managers; the
rules of a claim (what a repeat, a mismatch or a busy key means to the caller) live in
``_core`` (async) and ``_sync`` (its twin), both on top of :func:`decide`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol, runtime_checkable

#: Longest event id accepted (Stripe's limit for idempotency keys). Hash longer keys yourself.
MAX_EVENT_ID_LENGTH = 255


class IdempotencyError(Exception):
    """Base class of this library's errors."""


class AlreadyInProgress(IdempotencyError):
    """Another holder has a live claim on this event id (or, joined to a transaction, another
    transaction is claiming it right now). Retry later, or claim with ``wait=``."""

    def __init__(self, event_id: str, processor: str, retry_after: float | None) -> None:
        self.event_id = event_id
        self.processor = processor
        #: seconds until the holder's lease ends, when the store knows it
        self.retry_after = retry_after
        hint = f"; its lease ends in {retry_after:.3f}s" if retry_after else ""
        super().__init__(f"event {event_id!r} is in progress for processor {processor!r}{hint}")


class PayloadMismatch(IdempotencyError):
    """The event id was claimed before with a different payload: a reused key, not a repeat."""

    def __init__(self, event_id: str, processor: str) -> None:
        self.event_id = event_id
        self.processor = processor
        super().__init__(
            f"event {event_id!r} was claimed for processor {processor!r} with a different payload"
        )


class LeaseLost(IdempotencyError):
    """The claim's lease ended and another holder took the event over before this one
    completed, released or extended it. The effect may have run twice: choose a lease longer
    than the handler, or extend it (``claim.extend()``) while the handler runs."""

    def __init__(self, event_id: str, processor: str, action: str) -> None:
        self.event_id = event_id
        self.processor = processor
        super().__init__(
            f"cannot {action} event {event_id!r} for processor {processor!r}: its lease was "
            "taken over by another holder"
        )


class StoredError(IdempotencyError):
    """A repeat of a decorated call whose first run raised an error kept with
    ``store_errors=``, when that error's class is no longer among ``store_errors`` (or cannot
    be built again from its arguments): its class name and arguments as stored."""

    def __init__(self, error: str, arguments: list[Any]) -> None:
        self.error = error
        self.arguments = arguments
        super().__init__(f"the first run raised {error}{tuple(arguments)!r} (stored)")


class InvalidEventId(IdempotencyError, ValueError, TypeError):
    """An event id (or processor name) the library cannot key a record by: not str or
    UTF-8 bytes, empty, longer than 255 characters, or holding a NUL. A ``ValueError`` and a
    ``TypeError`` too, for callers that caught those before it existed."""


class NotSerializable(IdempotencyError, TypeError):
    """A payload the hash cannot encode canonically, or a result the serializer cannot
    store. Raised before anything is written for a payload, and by ``claim.complete()``
    for a result: the effect ran, so the claim still completes, with no result (a repeat
    reads ``None``), unless joined to a transaction that the error rolls back with it."""


class Outcome(enum.Enum):
    """What a store's claim step found."""

    ACQUIRED = "acquired"  # no record: this caller holds a new claim
    TAKEN_OVER = "taken_over"  # an in-progress record whose lease had ended: now ours
    COMPLETED = "completed"  # a repeat: the record holds the first run's result
    IN_PROGRESS = "in_progress"  # another holder's lease is live
    BUSY = "busy"  # (joined to a transaction) another transaction is claiming it now
    MISMATCH = "mismatch"  # a record with a different payload hash


@dataclass(frozen=True)
class ClaimRequest:
    processor: str
    event_id: str
    payload_hash: bytes | None
    token: str  # 32 hex digits, unique per claim attempt: fences complete/release/extend
    lease: timedelta
    expire_after: timedelta
    # joined to a transaction: how long to wait on the other transaction's lock before
    # answering BUSY (None: answer BUSY at once)
    block: timedelta | None


@dataclass(frozen=True)
class ClaimReply:
    outcome: Outcome
    result: bytes | None = None  # COMPLETED: the serialized first result
    # IN_PROGRESS: seconds left on the holder's lease; BUSY: a hint (the store cannot see
    # the other transaction's claim)
    retry_after: float | None = None
    attempts: int | None = None  # claims of this id so far, this one included (None: unknown)
    locator: Any = None  # where the record lives (PostgreSQL: its partition's period)


@dataclass(frozen=True)
class Held:
    """A claim this caller holds, as complete/release/extend address it."""

    processor: str
    event_id: str
    token: str
    payload_hash: bytes | None
    locator: Any


@runtime_checkable
class AsyncStore(Protocol):
    """The async half of a store. ``connection`` is the caller's transaction (PostgreSQL)."""

    #: the longest ``expire_after`` the store keeps records for (None: any)
    max_expire_after: timedelta | None

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply: ...

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool: ...

    async def release(self, held: Held, connection: Any = None) -> bool: ...

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool: ...


@runtime_checkable
class SyncStore(Protocol):
    """The sync half of a store (the same records, the same rules)."""

    max_expire_after: timedelta | None

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply: ...

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool: ...

    def release_sync(self, held: Held, connection: Any = None) -> bool: ...

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool: ...


class Serializer(Protocol):
    """How a result is stored: ``dumps`` to bytes and back."""

    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class JsonSerializer:
    """The default: results must be JSON values (a charge id, a dict of ids, None); a
    ``Decimal``, a ``datetime`` or a set is refused (``NotSerializable``), convert it first."""

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)


def payload_hash(payload: object) -> bytes | None:
    """SHA-256 of a payload: bytes as they are, str as UTF-8, anything else as canonical JSON
    (sorted keys, no spaces). ``None`` means no payload check.

    Only JSON values are hashed: anything else raises ``NotSerializable`` before the claim.
    Falling back to ``str()`` would hash reprs that are not stable (an object's default repr
    holds its address, a set's order depends on the process's hash seed), so a true repeat
    would be refused as ``PayloadMismatch`` by the next process."""
    if payload is None:
        return None
    if isinstance(payload, bytes | bytearray | memoryview):
        data = bytes(payload)
    elif isinstance(payload, str):
        data = payload.encode()
    else:
        try:
            data = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
        except (TypeError, ValueError) as exc:
            raise NotSerializable(
                f"payload is not a JSON value ({exc}); pass bytes, str or a JSON value"
            ) from exc
    return hashlib.sha256(data).digest()


def check_event_id(event_id: object) -> str:
    """The id must come from the producer: a non-empty str of at most 255 characters."""
    if isinstance(event_id, bytes):
        try:
            event_id = event_id.decode()
        except UnicodeDecodeError:
            raise InvalidEventId(f"event id {event_id!r} is not UTF-8") from None
    if not isinstance(event_id, str):
        raise InvalidEventId(f"event id must be str or bytes, not {type(event_id).__name__}")
    if not event_id:
        raise InvalidEventId("event id is empty (the id must come from the producer)")
    if len(event_id) > MAX_EVENT_ID_LENGTH:
        raise InvalidEventId(
            f"event id longer than {MAX_EVENT_ID_LENGTH} characters: hash it first"
        )
    if "\x00" in event_id:
        raise InvalidEventId("event id contains a NUL character")
    return event_id


def new_token() -> str:
    return uuid.uuid4().hex


def mismatched(stored: bytes | None, ours: bytes | None) -> bool:
    """A payload mismatch: both sides have a hash and they differ."""
    return stored is not None and ours is not None and stored != ours


def positive(value: timedelta, name: str) -> timedelta:
    if value <= timedelta(0):
        raise ValueError(f"{name} must be positive, not {value}")
    return value


def millis(value: timedelta) -> int:
    """A duration in whole milliseconds, at least 1."""
    return max(1, int(value.total_seconds() * 1000))
