"""What the async claim (``_core``) and its sync twin (``_sync``) share: the settings of an
``Idempotency`` (store, processor namespace, lease, expiry, serializer), the state a claim
knows, and how long a claim waits for a busy id."""

from __future__ import annotations

import copy
import inspect
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Generic, Self, TypeVar

from ._base import (
    ClaimReply,
    ClaimRequest,
    Held,
    JsonSerializer,
    NotSerializable,
    Outcome,
    Serializer,
    check_processor,
    new_token,
    positive,
)

StoreT = TypeVar("StoreT")

#: Waiting for a busy id polls the store, starting at 5 ms and doubling up to ``max_poll``.
FIRST_POLL = 0.005

#: How a stored error result (``complete_error``) is told from a result: this prefix before
#: the serializer's bytes (no JSON text starts with a NUL).
ERROR_MARK = b"\x00idempotent-consumer:error\x00"


def load_result(serializer: Serializer, data: bytes | None) -> tuple[Any, bool]:
    """A stored result and whether it is an error result (``complete_error``)."""
    if data is None:
        return None, False
    if data.startswith(ERROR_MARK):
        return serializer.loads(data[len(ERROR_MARK) :]), True
    return serializer.loads(data), False


class Settings(Generic[StoreT]):
    """What the async and the sync ``Idempotency`` share: the store and the namespace."""

    def __init__(
        self,
        store: StoreT,
        processor: str,
        *,
        lease: timedelta = timedelta(seconds=30),
        expire_after: timedelta = timedelta(days=7),
        serializer: Serializer | None = None,
        max_poll: timedelta = timedelta(milliseconds=250),
        unknown_outcome: tuple[type[Exception], ...] = (TimeoutError,),
    ) -> None:
        #: where the records live
        self.store = store
        #: the namespace of the records: one per consumer group (each group dedups on its
        #: own); any str of 1 to 255 characters without NUL (``billing:v2`` too)
        self.processor = check_processor(processor)
        #: how long a claim holds an event before another holder may take it over; measured
        #: on the store's clock (PostgreSQL's, Redis's), extend it for long handlers
        self.lease = positive(lease, "lease")
        #: how long a record is kept after its first claim (repeats later than this run
        #: again); a claim still in progress then is taken over by the next claim (attempts
        #: counted), not forgotten, and kept another ``expire_after`` from the takeover
        self.expire_after = positive(expire_after, "expire_after")
        #: how results are stored (default: JSON)
        self.serializer: Serializer = serializer or JsonSerializer()
        #: the longest pause between two polls while waiting for a busy id
        self.max_poll = positive(max_poll, "max_poll")
        #: exceptions after which the effect may or may not have happened: a body that
        #: raises one keeps its claim (not joined to a transaction) until the lease ends,
        #: and a takeover runs it, counted in ``attempts``, as after a cancellation; any
        #: other ``Exception`` releases the claim and the redelivery runs at once. Default
        #: ``(TimeoutError,)``: a timed-out call (``asyncio.wait_for``, a socket timeout,
        #: aiohttp's) may have reached the other side. Add your HTTP client's timeout when
        #: it is no ``TimeoutError`` (``httpx.TimeoutException``, requests' ``Timeout``);
        #: ``()`` releases on every ``Exception``, as 1.0 did.
        self.unknown_outcome = unknown_outcomes(unknown_outcome)
        if expire_after < lease:
            # A record that may expire while its claim is live lets a second holder in.
            raise ValueError(
                f"expire_after={expire_after} is shorter than the lease ({lease}): a claim "
                "could expire while its holder runs the effect; raise expire_after or "
                "shorten the lease"
            )
        limit = getattr(store, "max_expire_after", None)
        if limit is not None and expire_after > limit:
            raise ValueError(
                f"expire_after={expire_after} is longer than the store keeps records "
                f"({limit}): raise the store's retention or shorten expire_after"
            )

    def scoped(self, name: str) -> Self:
        """The same store and settings, records kept under the processor ``<processor>/<name>``:
        a namespace of their own (the decorators' per-function keys)."""
        scoped = copy.copy(self)
        scoped.processor = check_processor(f"{self.processor}/{name}")
        return scoped

    def _request(
        self, event_id: str, digest: bytes | None, block: timedelta | None
    ) -> ClaimRequest:
        return ClaimRequest(
            processor=self.processor,
            event_id=event_id,
            payload_hash=digest,
            token=new_token(),
            lease=self.lease,
            expire_after=self.expire_after,
            block=block,
        )


def unknown_outcomes(kinds: object) -> tuple[type[Exception], ...]:
    """``unknown_outcome=`` checked: a tuple of ``Exception`` classes (a cancellation or an
    interrupt, not ``Exception``, always keeps the claim)."""
    if not isinstance(kinds, tuple) or not all(
        isinstance(kind, type) and issubclass(kind, Exception) for kind in kinds
    ):
        raise TypeError(f"unknown_outcome must be a tuple of Exception classes, not {kinds!r}")
    return kinds


class ClaimState:
    """What a claim knows; ``Claim`` and ``SyncClaim`` add ``extend``."""

    def __init__(
        self,
        event_id: str,
        processor: str,
        reply: ClaimReply,
        held: Held | None,
        result: Any,
        connection: Any,
        failed: bool = False,
    ) -> None:
        #: the event id claimed
        self.event_id = event_id
        #: the namespace it was claimed in
        self.processor = processor
        #: True for a repeat: the first run completed and ``result`` is its result
        self.done = reply.outcome is Outcome.COMPLETED
        #: the first run's result (a repeat), or what ``complete()`` was given
        self.result = result
        #: True when ``result`` is an error result: the first run stored it with
        #: ``complete_error()`` (a repeat), or this claim called it
        self.failed = failed
        #: claims of this id so far, this one included: 2 or more means an earlier holder
        #: crashed or hung mid-handler and its effect may be partly done (None: the store
        #: cannot tell, as with Redis, where an expired lease leaves no trace)
        self.attempts = reply.attempts
        #: the caller's connection the claim joined (PostgreSQL), or None
        self.connection = connection
        self._held = held
        self._serializer: Serializer = JsonSerializer()
        self._data: bytes | None = None  # the result, serialized by complete()
        #: complete()'s refusal of a result: the effect ran, only its result cannot be kept
        self._unstored: NotSerializable | None = None
        self._unknown_outcome: tuple[type[Exception], ...] = (TimeoutError,)

    @property
    def token(self) -> str:
        """The claim's fencing token: 32 hex digits, new for every claim that acquires or
        takes over the event, so a holder whose lease ended and was taken over carries an
        older token than the one now holding it. The store already compares it on
        ``complete``, ``release`` and ``extend``; an effect store can compare it too, to
        refuse a stale holder's write (Kleppmann's fencing tokens, Kafka's producer epoch):
        write it beside the effect, e.g. ``UPDATE ... SET token = %s WHERE id = %s AND
        (token IS NULL OR token = %s)`` with the token seen at the start, or keep the
        effect keyed by ``(event_id, token)``. Tokens are random, not increasing: compare
        them for equality with the one stored, not by order.

        A repeat (``done``) holds nothing and has no token: ``RuntimeError``."""
        if self._held is None:
            raise RuntimeError(
                f"event {self.event_id!r} is a repeat: it holds no claim and has no token"
            )
        return self._held.token

    @property
    def completed(self) -> bool:
        """True once this claim's body called ``complete`` or ``complete_error`` (even if the
        serializer then refused the result): a caller that completes claims with a handler's
        return value must not complete one the handler completed itself, which would
        overwrite its result (an error result read back as a success)."""
        return self.failed or self._data is not None or self._unstored is not None

    @property
    def unstored(self) -> NotSerializable | None:
        """``complete``'s refusal of this claim's result (the effect ran; only its result
        could not be kept, and the claim completes with none), or None."""
        return self._unstored

    @property
    def taken_over(self) -> bool:
        """True when this claim took the event over from a holder whose lease had ended."""
        return self.attempts is not None and self.attempts > 1

    def complete(self, result: Any = None) -> None:
        """Record the result; it is stored with the claim when the ``with`` block ends
        (a block that ends without ``complete`` completes with ``None``). A result the
        serializer cannot store raises ``NotSerializable`` here, and the claim still
        completes, with no result (a repeat reads ``None``): ``complete`` comes after the
        effect, and releasing the claim would run it again."""
        if self.done:
            raise RuntimeError(f"event {self.event_id!r} is a repeat: there is nothing to complete")
        self.failed = False
        try:
            data = self._serializer.dumps(result)
        except (TypeError, ValueError) as exc:
            refused = (
                exc
                if isinstance(exc, NotSerializable)
                else NotSerializable(
                    f"the result of {self.event_id!r} cannot be stored ({exc}): the effect "
                    "counts as done, repeats read None; convert the result to a JSON value, "
                    "or give Idempotency a serializer that stores it"
                )
            )
            self._unstored = refused
            if refused is exc:
                raise
            raise refused from exc
        self.result = result
        self._data = data

    def complete_error(self, result: Any = None) -> None:
        """Record an error result: the effect was refused for good (a declined payment, an
        invalid order), and a repeat must get the same refusal without trying again, as
        Stripe answers a retried request with the first one's error. The claim completes
        when the block ends (an exception leaving the block still releases it: catch the
        error inside the block); a repeat sees ``done`` and ``failed`` true and ``result``
        this result. Only for final refusals: a transient error (a timeout, an outage)
        must raise, so that the redelivery tries again."""
        if self.done:
            raise RuntimeError(f"event {self.event_id!r} is a repeat: there is nothing to complete")
        try:
            self.complete(result)
        finally:
            self.failed = True

    def _stored(self) -> bytes:
        """What completing stores: the serialized result, marked when it is an error."""
        data = self._data if self._data is not None else self._serializer.dumps(None)
        return ERROR_MARK + data if self.failed else data

    def _ended_by(self, exc: BaseException | None) -> str:
        """What the end of a claim not joined to a transaction does: "complete" (the block
        ended, or only the result was refused), "release" (the body raised: the effect did
        not happen, a redelivery runs it), or "keep" (cancelled, interrupted, or an
        exception of ``unknown_outcome``, a timeout: the effect may have happened, so the
        claim stays until its lease ends and a takeover runs it, counted in ``attempts``;
        releasing it would let the redelivery run the effect again at once, beside the
        first one's)."""
        if exc is None or exc is self._unstored:
            return "complete"
        if isinstance(exc, Exception) and not isinstance(exc, self._unknown_outcome):
            return "release"
        return "keep"

    def __repr__(self) -> str:
        state = "done" if self.done else "held"
        return f"<claim {self.processor}/{self.event_id} {state} attempts={self.attempts}>"


def renewal_every(every: timedelta | None, lease: timedelta) -> float:
    """Seconds between two renewals of ``keep_alive``: a third of the lease by default, so
    two renewals may fail or be late before the lease ends."""
    if every is None:
        return lease.total_seconds() / 3
    positive(every, "every")
    if every >= lease:
        raise ValueError(
            f"keep_alive(every={every}) must be shorter than the lease ({lease}): the lease "
            "would end between two renewals"
        )
    return every.total_seconds()


def wait_deadline(wait: bool | timedelta) -> float | None:
    """Monotonic deadline for waiting (None: no limit)."""
    if wait is True:
        return None
    if wait is False:
        return time.monotonic()
    return time.monotonic() + max(0.0, wait.total_seconds())


@dataclass(frozen=True)
class Repeat:
    """What ``on_repeat`` gets, everywhere (the decorators and ``IdempotentConsumer``): a
    repeat of an event whose first run completed, called for every repeat, an error result
    (``failed``) included. A repeat answers as the first run did: whatever the hook returns
    (awaited if it is awaitable) is what the decorated call returns, or what
    ``IdempotentConsumer.process`` returns; return ``repeat.result`` to keep the first run's
    result (as Powertools' ``response_hook(response, data_record)`` does). A decorated call
    whose first run raised an error of ``store_errors`` raises it again after the hook, as
    that first call did (a hook that raises raises instead)."""

    #: the event id
    event_id: str
    #: the namespace it was claimed in
    processor: str
    #: the first run's result, as the serializer gives it back
    result: Any
    #: claims of this id so far (None: the store cannot tell)
    attempts: int | None
    #: the claim that found the repeat (``claim.done`` is true)
    claim: ClaimState
    #: the Kafka record being handled (``IdempotentConsumer``, ``@idempotent``), else None
    record: Any = None
    #: True when the first run stored an error result (``claim.complete_error``)
    failed: bool = False

    @classmethod
    def of(cls, claim: ClaimState, record: Any = None) -> Repeat:
        return cls(
            claim.event_id,
            claim.processor,
            claim.result,
            claim.attempts,
            claim,
            record,
            claim.failed,
        )


async def answer_repeat(
    hook: Callable[[Repeat], Any] | None, claim: ClaimState, record: Any = None
) -> Any:
    """A repeat's answer, where the caller is async (the decorators, ``IdempotentConsumer``,
    the Faust helper): the first run's result, or what ``hook`` returns for the
    :class:`Repeat` (awaited if it is awaitable)."""
    if hook is None:
        return claim.result
    answer = hook(Repeat.of(claim, record))
    if inspect.isawaitable(answer):
        answer = await answer
    return answer


def one_argument(hook: Callable[..., Any]) -> bool:
    """Does ``hook`` take one positional argument (the 1.1 ``on_repeat(repeat)``), rather than
    two (1.0's shapes)?"""
    try:
        parameters = inspect.signature(hook).parameters.values()
    except (TypeError, ValueError):  # no signature to read: take it as the current shape
        return True
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in parameters)
    return len(positional) == 1 or (not positional and varargs)


def repeat_hook(
    hook: Callable[..., Any] | None,
    legacy: Callable[[Callable[..., Any], Repeat], Any],
    old_shape: str,
) -> Callable[[Repeat], Any] | None:
    """``on_repeat`` as a function of a :class:`Repeat`. A hook of 1.0's two-argument shape
    (``old_shape``) still works through ``legacy``, with a ``DeprecationWarning``."""
    if hook is None or one_argument(hook):
        return hook
    warnings.warn(
        f"on_repeat{old_shape} is deprecated since 1.1 and goes in 2.0: take one argument, "
        "a Repeat (repeat.result, repeat.record, repeat.claim, repeat.attempts), and return "
        "the answer",
        DeprecationWarning,
        stacklevel=3,
    )
    old = hook
    return lambda repeat: legacy(old, repeat)
