"""The claim: ``async with idem.claim(event_id) as claim`` (its sync twin is ``_sync``).

States of a record, as every store keeps them:

* no record            -> the claim inserts one *in progress* with a lease and runs the body;
* in progress, live    -> another holder runs it: ``AlreadyInProgress`` (or wait, if asked);
* in progress, expired -> its holder crashed or hung: the claim takes it over (a new token
  fences the old holder out, ``claim.attempts`` counts the takeovers);
* completed            -> a repeat: ``claim.done`` is true and ``claim.result`` is the first
  run's result; the body must return it without running the effect again;
* released             -> the body raised an ``Exception``: the record is deleted, the
  redelivery runs again. A body cancelled or interrupted (``CancelledError``,
  ``KeyboardInterrupt``: not an ``Exception``), or ended by an exception of
  ``unknown_outcome`` (default: ``TimeoutError``), may have done the effect: the claim stays
  in progress until its lease ends and a takeover runs it (``attempts`` says so). A result
  the serializer refuses (``complete`` raises ``NotSerializable``) comes after the effect:
  the record completes with no result.

A different payload hash under the same id is ``PayloadMismatch`` in any state.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from ._base import (
    AlreadyInProgress,
    AsyncStore,
    ClaimReply,
    EventId,
    Held,
    LeaseLost,
    Outcome,
    PayloadMismatch,
    check_event_id,
    payload_hash,
    positive,
)
from ._shared import (
    FIRST_POLL,
    ClaimState,
    Settings,
    load_result,
    renewal_every,
    wait_deadline,
)

T = TypeVar("T")


class Claim(ClaimState):
    """What ``async with idem.claim(...)`` yields."""

    _store: AsyncStore
    _lease: timedelta

    async def extend(self, lease: timedelta | None = None) -> None:
        """Push the lease's end to now + ``lease`` (default: the configured lease), for a
        handler that runs longer than its lease. ``LeaseLost`` if it was taken over."""
        if self._held is None:
            return
        lease = positive(lease or self._lease, "lease")
        if not await self._store.extend(self._held, lease, self.connection):
            raise LeaseLost(self.event_id, self.processor, "extend")

    def keep_alive(self, every: timedelta | None = None) -> KeepAlive:
        """Renew the lease while a long effect runs: ``async with claim.keep_alive():``
        calls ``extend()`` every ``every`` (default: a third of the lease) in a background
        task, and stops when the block ends.

        If a renewal finds the claim taken over (``LeaseLost``), or renewals keep failing
        until the lease has ended (the store unreachable: the claim may be taken over), the
        body is cancelled at its next ``await`` (as ``asyncio.timeout`` does) and the block
        raises ``LeaseLost`` instead of ``CancelledError``: another holder runs the effect,
        so this one stops as soon as it can rather than finishing a second copy. The
        cancellation can stop the body between two steps of the effect: keep the steps
        fenced by ``claim.token`` or transactional. A repeat (``done``) and a claim joined
        to a transaction (its row stays locked until the transaction ends) hold nothing to
        renew: the block runs with no renewals."""
        return KeepAlive(self, every)


class KeepAlive:
    """``claim.keep_alive()``: renews the lease in a background task while the block runs."""

    def __init__(self, claim: Claim, every: timedelta | None) -> None:
        self.claim = claim
        self._every = renewal_every(every, claim._lease)
        #: the ``LeaseLost`` that ended the renewals, once one has
        self.lost: LeaseLost | None = None
        #: renewals done so far
        self.renewals = 0
        self._body: asyncio.Task[Any] | None = None
        self._task: asyncio.Task[None] | None = None
        self._cancelled_body = False
        self._exiting = False

    async def __aenter__(self) -> KeepAlive:
        claim = self.claim
        if claim._held is None or claim.connection is not None:
            return self
        self._body = asyncio.current_task()
        self._task = asyncio.create_task(self._renew())
        return self

    async def _renew(self) -> None:
        claim = self.claim
        lease = claim._lease.total_seconds()
        renewed = time.monotonic()
        while True:
            await asyncio.sleep(self._every)
            try:
                await claim.extend()
            except LeaseLost as exc:
                self._lose(exc)
                return
            except Exception as exc:  # the store unreachable: retry until the lease ends
                if time.monotonic() - renewed >= lease:
                    lost = LeaseLost(claim.event_id, claim.processor, "extend")
                    lost.__cause__ = exc
                    self._lose(lost)
                    return
                continue
            renewed = time.monotonic()
            self.renewals += 1

    def _lose(self, lost: LeaseLost) -> None:
        self.lost = lost
        if not self._exiting and self._body is not None:
            self._cancelled_body = True
            self._body.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._exiting = True  # set before any await: the renewals no longer cancel the body
        task = self._task
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        if self.lost is None:
            return
        if self._cancelled_body and self._body is not None:
            self._body.uncancel()
            if isinstance(exc, asyncio.CancelledError) and self._body.cancelling():
                return None  # cancelled by someone else too: let that cancellation through
        raise self.lost


class Idempotency(Settings[AsyncStore]):
    """Exactly-once effects per ``(event id, processor)`` on a store (async).

    ::

        idem = Idempotency(PostgresStore(dsn), processor="billing")
        async with idem.claim(event_id, payload=record.value) as claim:
            if claim.done:
                return claim.result          # a repeat: the first run's result
            charge_id = await charge(...)
            claim.complete(charge_id)        # an exception releases it (a timeout keeps it)
    """

    def claim(
        self,
        event_id: EventId,
        *,
        payload: object = None,
        wait: bool | timedelta = False,
        connection: Any = None,
    ) -> ClaimContext:
        """Claim ``event_id`` for this processor: a str, UTF-8 bytes, or an int, float,
        Decimal, UUID, date or aware datetime, each keyed apart from the others
        (``check_event_id``: ``1`` and ``"1"`` are two ids).

        ``payload``: hashed and compared with the first claim's (``PayloadMismatch``).
        ``wait``: False raises ``AlreadyInProgress`` at once when another holder has it; True
        waits until it completes (then ``done``) or its lease ends (then a takeover); a
        timedelta waits at most that long. Joined to a transaction (``connection``), the wait
        for another transaction's claim of the id lasts at most the lease (``wait=True``) or
        the timedelta, then ``AlreadyInProgress``: a transaction left open does not hold the
        waiter for good, and the waiter's own transaction goes on.
        ``connection``: a psycopg connection (PostgreSQL only): the claim runs in its
        transaction (a savepoint inside an open one), so the effects written on it and the
        completed record commit together, or neither does.
        """
        return ClaimContext(self, check_event_id(event_id), payload, wait, connection)

    def for_processor(self, processor: str) -> Idempotency:
        """The same store and settings under another processor namespace."""
        return Idempotency(
            self.store,
            processor,
            lease=self.lease,
            expire_after=self.expire_after,
            serializer=self.serializer,
            max_poll=self.max_poll,
            unknown_outcome=self.unknown_outcome,
        )

    async def once(
        self,
        event_id: EventId,
        fn: Callable[[], Awaitable[T]],
        *,
        payload: object = None,
        wait: bool | timedelta = True,
    ) -> T:
        """Run ``fn`` once per event id and return its result; a repeat returns the first
        run's result without calling ``fn``."""
        async with self.claim(event_id, payload=payload, wait=wait) as claim:
            if claim.done:
                return claim.result  # type: ignore[no-any-return]
            result = await fn()
            claim.complete(result)
            return result


class ClaimContext:
    """The async context manager of one claim (``Idempotency.claim``)."""

    def __init__(
        self,
        idem: Idempotency,
        event_id: str,
        payload: object,
        wait: bool | timedelta,
        connection: Any,
    ) -> None:
        self._idem = idem
        self._event_id = event_id
        self._digest = payload_hash(payload)
        self._wait = wait
        self._connection = connection
        self._tx: Any = None
        self._claim: Claim | None = None

    async def _acquire(self) -> tuple[ClaimReply, Held | None]:
        idem = self._idem
        deadline = wait_deadline(self._wait)
        delay = FIRST_POLL
        # Joined to a transaction: wait on the other transaction's claim (its lock, no
        # polling), at most the time left of wait=, or the lease for wait=True: a transaction
        # left open must not hold the waiter for good. Not joined, or wait=False: the store
        # answers BUSY at once.
        joined_wait = self._connection is not None and self._wait is not False
        lock_deadline = (
            deadline if deadline is not None else time.monotonic() + idem.lease.total_seconds()
        )
        while True:
            block = None
            if joined_wait:
                block = timedelta(seconds=max(0.001, lock_deadline - time.monotonic()))
            request = idem._request(self._event_id, self._digest, block)
            reply = await idem.store.claim(request, self._connection)
            outcome = reply.outcome
            if outcome in (Outcome.ACQUIRED, Outcome.TAKEN_OVER):
                held = Held(
                    idem.processor, self._event_id, request.token, self._digest, reply.locator
                )
                return reply, held
            if outcome is Outcome.COMPLETED:
                return reply, None
            if outcome is Outcome.MISMATCH:
                raise PayloadMismatch(self._event_id, idem.processor)
            if outcome is Outcome.BUSY and block is not None:  # waited as long as allowed
                raise AlreadyInProgress(self._event_id, idem.processor, reply.retry_after)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                raise AlreadyInProgress(self._event_id, idem.processor, reply.retry_after)
            pause = delay
            if reply.retry_after:
                pause = min(pause, reply.retry_after)
            if deadline is not None:
                pause = min(pause, deadline - now)
            await asyncio.sleep(pause)
            delay = min(delay * 2, idem.max_poll.total_seconds())

    async def __aenter__(self) -> Claim:
        if self._connection is not None:
            self._tx = self._connection.transaction()
            await self._tx.__aenter__()
        try:
            reply, held = await self._acquire()
            result, failed = None, False
            if reply.outcome is Outcome.COMPLETED:
                result, failed = load_result(self._idem.serializer, reply.result)
        except BaseException as exc:
            if self._tx is not None:
                await self._tx.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        claim = Claim(
            self._event_id, self._idem.processor, reply, held, result, self._connection, failed
        )
        claim._store = self._idem.store
        claim._lease = self._idem.lease
        claim._serializer = self._idem.serializer
        claim._unknown_outcome = self._idem.unknown_outcome
        self._claim = claim
        return claim

    async def _complete(self, claim: Claim) -> None:
        assert claim._held is not None
        data = claim._stored()
        ok = await self._idem.store.complete(
            claim._held, data, self._idem.expire_after, self._connection
        )
        if not ok:
            raise LeaseLost(self._event_id, self._idem.processor, "complete")

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        claim = self._claim
        assert claim is not None
        if self._tx is None:
            if claim.done:
                return None
            ending = claim._ended_by(exc)
            if ending == "complete":
                await self._complete(claim)
            elif ending == "release":
                await self._release(claim)
            return None
        # Joined: completing writes in the caller's transaction; leaving the transaction
        # block commits it (or releases the savepoint), and an exception rolls the claim back
        # together with the effects written on the connection.
        if exc is None and not claim.done:
            try:
                await self._complete(claim)
            except BaseException as failure:
                await self._tx.__aexit__(type(failure), failure, failure.__traceback__)
                raise
        suppressed: bool | None = await self._tx.__aexit__(exc_type, exc, tb)
        return suppressed

    async def _release(self, claim: Claim) -> None:
        # As Powertools does when its delete fails (utilities/idempotency/base.py,
        # _get_function_response), a release that fails raises, with the body's exception
        # as its context: the caller must learn that the claim stays in progress until its
        # lease ends. A holder taken over is refused (the store's token fence) with LeaseLost.
        assert claim._held is not None
        if not await self._idem.store.release(claim._held):
            raise LeaseLost(self._event_id, self._idem.processor, "release")
