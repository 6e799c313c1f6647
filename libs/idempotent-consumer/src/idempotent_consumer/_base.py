"""What every store shares: the claim request and reply, errors, payload hashes, serializers.

A store does one atomic step per call and knows nothing of waiting or context managers; the
rules of a claim (what a repeat, a mismatch or a busy key means to the caller) live in
``_core`` (async) and ``_sync`` (its twin), both on top of :func:`decide`.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import uuid
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
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
    """An event id (or processor name) the library cannot key a record by: of a type it
    does not key (see :func:`check_event_id`), empty, longer than 255 characters, or holding
    a NUL. A ``ValueError`` and a ``TypeError`` too, for callers that caught those before it
    existed."""


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


#: The first character of the key of every id that is not a str (see :func:`check_event_id`):
#: U+FDD0, one of the code points Unicode reserves for a program's internal use, so no
#: producer's id is expected to start with it; a str id that does is refused, which keeps
#: the keys of str ids and of the other types apart.
TYPE_MARK = "\ufdd0"

#: What an event id may be (bytes are decoded as UTF-8; an Enum member counts as its value).
EventId = str | bytes | int | float | Decimal | uuid.UUID | date | enum.Enum


def _checked_key(key: str, what: str) -> str:
    if not key:
        raise InvalidEventId(f"{what} is empty (the id must come from the producer)")
    if len(key) > MAX_EVENT_ID_LENGTH:
        raise InvalidEventId(f"{what} longer than {MAX_EVENT_ID_LENGTH} characters: hash it first")
    if "\x00" in key:
        raise InvalidEventId(f"{what} contains a NUL character")
    return key


def _decimal_text(value: Decimal) -> str:
    """The text of a finite Decimal, positional (``100``, ``0.0000001``), with its trailing
    zeros dropped so that equal amounts (``1.0``, ``1.00``) share a key. Exact:
    ``Decimal.normalize()`` would round to the context's precision and let two different
    long values share a key."""
    sign, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)  # finite, checked by the caller
    kept = list(digits)
    while len(kept) > 1 and kept[-1] == 0:
        kept.pop()
        exponent += 1
    if kept == [0]:
        return "0"
    return format(Decimal((sign, tuple(kept), exponent)), "f")


def _tagged(event_id: object) -> str | None:
    """The text behind the type tag of an id that is not a str (None: not a type keyed)."""
    if isinstance(event_id, bool):  # before int: True is an int too
        return f"bool:{'true' if event_id else 'false'}"
    if isinstance(event_id, int):
        try:
            return f"int:{int.__repr__(event_id)}"
        except ValueError:  # more digits than Python converts: far over the length limit
            raise InvalidEventId(
                f"int event id longer than {MAX_EVENT_ID_LENGTH} characters: hash it first"
            ) from None
    if isinstance(event_id, float):
        if not math.isfinite(event_id):
            raise InvalidEventId(f"event id {event_id!r} is not a finite number")
        # repr is the shortest text that reads back as the same float, on every platform;
        # -0.0 == 0.0, so they share a key
        return f"float:{float.__repr__(event_id + 0.0)}"
    if isinstance(event_id, Decimal):
        if not event_id.is_finite():
            raise InvalidEventId(f"event id {event_id!r} is not a finite number")
        return f"decimal:{_decimal_text(event_id)}"
    if isinstance(event_id, uuid.UUID):
        return f"uuid:{event_id}"
    if isinstance(event_id, datetime):  # before date: a datetime is a date too
        if event_id.utcoffset() is None:
            raise InvalidEventId(
                f"event id {event_id!r} is a naive datetime: give it a timezone (a naive "
                "time names two instants in the hour a clock turns back, two events one key)"
            )
        return f"datetime:{event_id.astimezone(UTC).isoformat()}"
    if isinstance(event_id, date):
        return f"date:{event_id.isoformat()}"
    return None


def check_event_id(event_id: object) -> str:
    """The key of an event id: what the stores keep the record under.

    * a str is its own key, as in 1.0; UTF-8 bytes are decoded to the str (a Kafka key and
      its text are one id);
    * an int, bool, finite float, Decimal, UUID, date or timezone-aware datetime gets a key
      of ``TYPE_MARK``, its type and its text: ``42`` is ``"\ufdd0int:42"``, so ``1``,
      ``"1"``, ``True``, ``1.0`` and ``Decimal("1")`` are five ids, as they are five JSON
      values (Powertools keys by the JSON of the value). Equal values of one type share a
      key: ``Decimal("1.0")`` and ``Decimal("1.00")``; a datetime is keyed by its instant
      in UTC, so the same instant in two offsets is one id;
    * an Enum member is keyed as its value (an enum names a value: the key survives renaming
      the enum, or turning it into an IntEnum or a StrEnum);
    * anything else raises ``InvalidEventId`` naming its type: a naive datetime (its
      instant depends on a timezone the id does not carry), NaN and infinities (never
      equal to themselves), and tuples: a composite id is better joined by the caller
      (``f"{order_id}/{line}"``), a key that stays readable and searchable in the store,
      than by an encoding of this library that every version must keep.

    A key has 1 to 255 characters and no NUL; a str id may not start with ``TYPE_MARK``."""
    if isinstance(event_id, enum.Enum):
        event_id = event_id.value
    if isinstance(event_id, bytes):
        try:
            event_id = event_id.decode()
        except UnicodeDecodeError:
            raise InvalidEventId(f"event id {event_id!r} is not UTF-8") from None
    if isinstance(event_id, str):
        # str.__str__: the characters themselves; a str subclass's own __str__ may differ
        key = str.__str__(event_id)
        if key.startswith(TYPE_MARK):
            raise InvalidEventId(
                "event id starts with U+FDD0, the mark of the keys of ids that are not str"
            )
        return _checked_key(key, "event id")
    tagged = _tagged(event_id)
    if tagged is None:
        raise InvalidEventId(
            f"event id of type {type(event_id).__name__}: use a str, UTF-8 bytes, an int, "
            "a finite float, a Decimal, a UUID, a date or an aware datetime"
        )
    return _checked_key(TYPE_MARK + tagged, "event id")


def check_processor(processor: object) -> str:
    """A processor name: any str of 1 to 255 characters without NUL (PostgreSQL's text
    cannot hold one). Every store keeps any such name apart from every other."""
    if not isinstance(processor, str):
        raise InvalidEventId(f"processor must be a str, not {type(processor).__name__}")
    return _checked_key(str.__str__(processor), "processor")


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
