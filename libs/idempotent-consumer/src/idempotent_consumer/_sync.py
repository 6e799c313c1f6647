"""The sync twin of ``_core``: ``with idem.claim(event_id) as claim`` (same rules, same stores).

Kept line for line beside ``_core`` so the two read alike; ``tests/idempotency`` runs the
same cases through both.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, TypeVar

from ._base import (
    AlreadyInProgress,
    ClaimReply,
    EventId,
    Held,
    LeaseLost,
    Outcome,
    PayloadMismatch,
    SyncStore,
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


class SyncClaim(ClaimState):
    """What ``with idem.claim(...)`` yields."""

    _store: SyncStore
    _lease: timedelta

    def extend(self, lease: timedelta | None = None) -> None:
        """Push the lease's end to now + ``lease``; ``LeaseLost`` if it was taken over."""
        if self._held is None:
            return
        lease = positive(lease or self._lease, "lease")
        if not self._store.extend_sync(self._held, lease, self.connection):
            raise LeaseLost(self.event_id, self.processor, "extend")

    def keep_alive(self, every: timedelta | None = None) -> SyncKeepAlive:
        """Renew the lease while a long effect runs: ``with claim.keep_alive() as alive:``
        calls ``extend()`` every ``every`` (default: a third of the lease) in a daemon
        thread, and stops when the block ends.

        A thread cannot be interrupted, so the body is not stopped when the claim is lost
        (a renewal finds it taken over, or renewals keep failing until the lease has
        ended): the block raises ``LeaseLost`` when it ends, and the body can call
        ``alive.check()`` between the steps of a long effect to stop at the first one after
        the loss. The store must be usable from two threads (every store of this library
        is). A repeat and a claim joined to a transaction hold nothing to renew."""
        return SyncKeepAlive(self, every)


class SyncKeepAlive:
    """``claim.keep_alive()``: renews the lease in a thread while the block runs."""

    def __init__(self, claim: SyncClaim, every: timedelta | None) -> None:
        self.claim = claim
        self._every = renewal_every(every, claim._lease)
        #: the ``LeaseLost`` that ended the renewals, once one has
        self.lost: LeaseLost | None = None
        #: renewals done so far
        self.renewals = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> SyncKeepAlive:
        claim = self.claim
        if claim._held is None or claim.connection is not None:
            return self
        self._thread = threading.Thread(
            target=self._renew, name=f"keep-alive {claim.event_id}", daemon=True
        )
        self._thread.start()
        return self

    def _renew(self) -> None:
        claim = self.claim
        lease = claim._lease.total_seconds()
        renewed = time.monotonic()
        while not self._stop.wait(self._every):
            try:
                claim.extend()
            except LeaseLost as exc:
                self.lost = exc
                return
            except Exception as exc:  # the store unreachable: retry until the lease ends
                if time.monotonic() - renewed >= lease:
                    lost = LeaseLost(claim.event_id, claim.processor, "extend")
                    lost.__cause__ = exc
                    self.lost = lost
                    return
                continue
            renewed = time.monotonic()
            self.renewals += 1

    def check(self) -> None:
        """Raise ``LeaseLost`` if the claim was lost: call it between the steps of a long
        effect."""
        if self.lost is not None:
            raise self.lost

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.lost is not None and exc is not self.lost:
            raise self.lost


class SyncIdempotency(Settings[SyncStore]):
    """Exactly-once effects per ``(event id, processor)`` on a store (sync twin; the same
    settings as ``Idempotency``, ``unknown_outcome`` included).

    ::

        idem = SyncIdempotency(PostgresStore(dsn), processor="billing")
        with idem.claim(event_id, payload=record.value) as claim:
            if claim.done:
                return claim.result
            claim.complete(charge(...))
    """

    def claim(
        self,
        event_id: EventId,
        *,
        payload: object = None,
        wait: bool | timedelta = False,
        connection: Any = None,
    ) -> SyncClaimContext:
        """As ``Idempotency.claim``; ``connection`` is a sync psycopg connection."""
        return SyncClaimContext(self, check_event_id(event_id), payload, wait, connection)

    def for_processor(self, processor: str) -> SyncIdempotency:
        return SyncIdempotency(
            self.store,
            processor,
            lease=self.lease,
            expire_after=self.expire_after,
            serializer=self.serializer,
            max_poll=self.max_poll,
            unknown_outcome=self.unknown_outcome,
        )

    def once(
        self,
        event_id: EventId,
        fn: Callable[[], T],
        *,
        payload: object = None,
        wait: bool | timedelta = True,
    ) -> T:
        """Run ``fn`` once per event id and return its result (a repeat: the first one's)."""
        with self.claim(event_id, payload=payload, wait=wait) as claim:
            if claim.done:
                return claim.result  # type: ignore[no-any-return]
            result = fn()
            claim.complete(result)
            return result


class SyncClaimContext:
    """The context manager of one claim (``SyncIdempotency.claim``)."""

    def __init__(
        self,
        idem: SyncIdempotency,
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
        self._claim: SyncClaim | None = None

    def _acquire(self) -> tuple[ClaimReply, Held | None]:
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
            reply = idem.store.claim_sync(request, self._connection)
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
            time.sleep(pause)
            delay = min(delay * 2, idem.max_poll.total_seconds())

    def __enter__(self) -> SyncClaim:
        if self._connection is not None:
            self._tx = self._connection.transaction()
            self._tx.__enter__()
        try:
            reply, held = self._acquire()
            result, failed = None, False
            if reply.outcome is Outcome.COMPLETED:
                result, failed = load_result(self._idem.serializer, reply.result)
        except BaseException as exc:
            if self._tx is not None:
                self._tx.__exit__(type(exc), exc, exc.__traceback__)
            raise
        claim = SyncClaim(
            self._event_id, self._idem.processor, reply, held, result, self._connection, failed
        )
        claim._store = self._idem.store
        claim._lease = self._idem.lease
        claim._serializer = self._idem.serializer
        claim._unknown_outcome = self._idem.unknown_outcome
        self._claim = claim
        return claim

    def _complete(self, claim: SyncClaim) -> None:
        assert claim._held is not None
        data = claim._stored()
        ok = self._idem.store.complete_sync(
            claim._held, data, self._idem.expire_after, self._connection
        )
        if not ok:
            raise LeaseLost(self._event_id, self._idem.processor, "complete")

    def __exit__(
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
                self._complete(claim)
            elif ending == "release":
                self._release(claim)
            return None
        if exc is None and not claim.done:
            try:
                self._complete(claim)
            except BaseException as failure:
                self._tx.__exit__(type(failure), failure, failure.__traceback__)
                raise
        suppressed: bool | None = self._tx.__exit__(exc_type, exc, tb)
        return suppressed

    def _release(self, claim: SyncClaim) -> None:
        # A failed release raises (as in _core); a holder taken over gets LeaseLost.
        assert claim._held is not None
        if not self._idem.store.release_sync(claim._held):
            raise LeaseLost(self._event_id, self._idem.processor, "release")
