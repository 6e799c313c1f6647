"""Bounded memory, no database: a fixed array of slots holding full event ids.

After the NSQ client's "opposite of a Bloom filter": an id goes into slot ``hash(id) % N``,
overwriting whatever *completed* id was there (a live in-progress claim is never
overwritten: another id landing on its slot waits, or gets ``AlreadyInProgress``, until it
completes, is released or its lease ends). A match is certain (the slot holds the *full*
id, not a digest), so an original is never taken for a repeat; no match means "probably new", and a
repeat whose slot was overwritten in the meantime slips through. When a handler fails, its
slot is erased so the redelivery is processed, not dropped.

How many repeats are caught: after ``x`` more claims, an id's slot has been overwritten with
probability ``1 - (1 - 1/N)**x`` (each claim of a new id writes one uniformly chosen slot).
So a repeat arriving ``x`` claims after its original is caught with probability
``(1 - 1/N)**x`` (:func:`catch_rate`), and catching a share ``p`` of repeats ``x`` claims
later needs ``N = 1 / (1 - p**(1/x))`` slots (:func:`slots_for`): 90% at 3.6M messages (an
hour at 1,000 msg/s) needs 34.2M slots (1.56M slots catch only 10% of them).

The store lives in one process: it dedups that process's own redeliveries (a retry loop, a
consumer that re-reads after a failed commit), not another instance's. Memory: a list of N
pointers (8 bytes a slot), about 250 bytes per filled slot (measured with a 36-character id
and a short result), and 8 bytes per claim of the catch-rate horizon (default: the 90%
window, ~0.105 N).
"""

from __future__ import annotations

import hashlib
import threading
import time
from array import array
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._base import ClaimReply, ClaimRequest, Held, Outcome, mismatched
from ._sizing import catch_rate, slots_for, window

__all__ = ["MemoryMetrics", "MemoryStore", "catch_rate", "slots_for", "window"]


class _Slot:
    __slots__ = (
        "attempts",
        "expires_at",
        "key",
        "lease_until",
        "payload_hash",
        "result",
        "seq",
        "state",
        "token",
    )

    def __init__(
        self,
        key: str,
        token: str,
        payload_hash: bytes | None,
        seq: int,
        lease_until: float,
        expires_at: float,
        attempts: int,
    ) -> None:
        self.key = key
        self.state = "p"
        self.token = token
        self.payload_hash = payload_hash
        self.result: bytes | None = None
        self.seq = seq
        self.lease_until = lease_until
        self.expires_at = expires_at
        self.attempts = attempts


@dataclass(frozen=True)
class MemoryMetrics:
    """A snapshot of a MemoryStore's counters and catch rates."""

    slots: int
    occupied: int
    claims: int  # claim calls (the "messages" of the formula)
    repeats_caught: int  # claims that matched a completed id
    evictions: int  # slots overwritten by another id
    horizon: int  # the distance (in claims) the catch rates are given for
    expected_catch_rate: float  # (1 - 1/N)**horizon
    #: of the ids written ``horizon`` claims ago, the share still in their slot: the catch
    #: rate a repeat arriving that far behind its original had (None until horizon claims)
    observed_catch_rate: float | None
    observed_over: int  # how many ids that share is measured over

    def as_dict(self) -> dict[str, float | int | None]:
        return dict(self.__dict__)


class MemoryStore:
    """A fixed array of ``slots`` slots holding full ids (see the module docstring).

    ``horizon``: the distance in claims that the catch-rate metric is given for (default:
    the window at 90%). ``seed``: keys the slot hash (BLAKE2b), fixed for reproducible tests.
    Thread-safe; its async methods never wait.
    """

    #: records live in memory only, as long as asked
    max_expire_after: timedelta | None = None

    def __init__(self, slots: int, *, horizon: int | None = None, seed: int = 0) -> None:
        if slots < 1:
            raise ValueError("slots must be >= 1")
        self.slots = slots
        self.horizon = window(slots, 0.9) if horizon is None else horizon
        self._hash_key = seed.to_bytes(16, "little", signed=False)
        self._array: list[_Slot | None] = [None] * slots
        self._lock = threading.Lock()
        self._claims = 0
        self._occupied = 0
        self._repeats = 0
        self._evictions = 0
        # Ring of the slot each of the last `horizon` claims wrote (-1: it wrote none), to
        # check, `horizon` claims later, whether that id is still there: 8 bytes a claim.
        self._ring = array("q", [-1]) * max(1, self.horizon)
        self._checked = 0
        self._survived = 0

    def _index(self, key: str) -> int:
        digest = hashlib.blake2b(key.encode(), digest_size=8, key=self._hash_key).digest()
        return int.from_bytes(digest, "little") % self.slots

    @staticmethod
    def _key(processor: str, event_id: str) -> str:
        # NUL, which neither a processor nor an event id holds (``check_processor``,
        # ``check_event_id``), so no two pairs share a key; any other separator may be
        # inside either name, ("a", "b:c") and ("a:b", "c") one key.
        return f"{processor}\x00{event_id}"

    async def close(self) -> None:
        """Nothing to close (no connection, no thread): here so that shutdown code closes
        any store alike (``await store.close()``). The records stay, and the store stays
        usable; they go with the store object."""

    def close_sync(self) -> None:
        """The sync twin of :meth:`close`: nothing to close."""

    def metrics(self) -> MemoryMetrics:
        with self._lock:
            checked = self._checked
            return MemoryMetrics(
                slots=self.slots,
                occupied=self._occupied,
                claims=self._claims,
                repeats_caught=self._repeats,
                evictions=self._evictions,
                horizon=self.horizon,
                expected_catch_rate=catch_rate(self.slots, self.horizon),
                observed_catch_rate=self._survived / checked if checked else None,
                observed_over=checked,
            )

    def contains(self, processor: str, event_id: str) -> bool:
        """Is this id in its slot right now (in progress or completed)?"""
        key = self._key(processor, event_id)
        slot = self._array[self._index(key)]
        return slot is not None and slot.key == key and slot.expires_at > time.monotonic()

    # -- the sync store -------------------------------------------------------------------

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        if connection is not None:
            raise TypeError("MemoryStore cannot join a database transaction")
        key = self._key(request.processor, request.event_id)
        index = self._index(key)
        now = time.monotonic()
        lease_until = now + request.lease.total_seconds()
        with self._lock:
            self._claims += 1
            seq = self._claims
            self._observe(seq)
            slot = self._array[index]
            # This id's record: unexpired, or a claim still in progress past its expiry (its
            # holder crashed or hung: taken over, not forgotten, unless another payload
            # makes this a new event). Only a completed record expires into a new claim.
            if (
                slot is not None
                and slot.key == key
                and (
                    slot.expires_at > now
                    or (
                        slot.state == "p"
                        and not mismatched(slot.payload_hash, request.payload_hash)
                    )
                )
            ):
                if mismatched(slot.payload_hash, request.payload_hash):
                    return ClaimReply(Outcome.MISMATCH, attempts=slot.attempts)
                if slot.state == "c":
                    self._repeats += 1
                    return ClaimReply(Outcome.COMPLETED, result=slot.result, attempts=slot.attempts)
                if slot.lease_until > now:
                    return ClaimReply(
                        Outcome.IN_PROGRESS,
                        retry_after=slot.lease_until - now,
                        attempts=slot.attempts,
                    )
                slot.token = request.token
                slot.lease_until = lease_until
                slot.expires_at = max(slot.expires_at, now + request.expire_after.total_seconds())
                slot.attempts += 1
                if slot.payload_hash is None:
                    slot.payload_hash = request.payload_hash
                return ClaimReply(Outcome.TAKEN_OVER, attempts=slot.attempts)
            if slot is not None and slot.state == "p" and slot.lease_until > now:
                # Another id's live claim: overwriting it would let its holder's complete
                # land on nothing while a redelivery of that id claims it again, two holders
                # of one id. So this id waits (or gets AlreadyInProgress) until that claim
                # completes, is released or its lease ends; completed ids are overwritten.
                return ClaimReply(Outcome.IN_PROGRESS, retry_after=slot.lease_until - now)
            if slot is None:
                self._occupied += 1
            elif slot.key != key:
                self._evictions += 1
            self._ring[seq % len(self._ring)] = index
            self._array[index] = _Slot(
                key,
                request.token,
                request.payload_hash,
                seq,
                lease_until,
                now + request.expire_after.total_seconds(),
                1,
            )
            return ClaimReply(Outcome.ACQUIRED, attempts=1)

    def _observe(self, seq: int) -> None:
        """Was the id written `horizon` claims ago still in its slot? (then clear its entry
        in the ring: this claim's own write, if any, goes there)."""
        ring = self._ring
        position = seq % len(ring)
        index = ring[position]
        if index >= 0:
            self._checked += 1
            slot = self._array[index]
            if slot is not None and slot.seq == seq - len(ring):
                self._survived += 1
            ring[position] = -1

    def _ours(self, held: Held) -> tuple[int, _Slot | None, bool]:
        """(index, slot, ours): ``ours`` when the slot holds this id under this token."""
        key = self._key(held.processor, held.event_id)
        index = self._index(key)
        slot = self._array[index]
        ours = slot is not None and slot.key == key and slot.token == held.token
        return index, slot, ours

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        with self._lock:
            _, slot, ours = self._ours(held)
            if ours:
                assert slot is not None
                slot.state = "c"
                slot.result = result
            # Not ours: a live claim is never overwritten, so the slot went to another
            # claim after this one's lease ended (a takeover, or another id): LeaseLost, as
            # on the other stores.
            return ours

    def release_sync(self, held: Held, connection: Any = None) -> bool:
        with self._lock:
            index, _, ours = self._ours(held)
            if ours:
                self._array[index] = None  # erased: the redelivery is processed
                self._occupied -= 1
            return ours

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        with self._lock:
            _, slot, ours = self._ours(held)
            if ours:
                assert slot is not None
                slot.lease_until = time.monotonic() + lease.total_seconds()
            return ours

    # -- the async store (the same calls: nothing here waits) -----------------------------

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        return self.claim_sync(request, connection)

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        return self.complete_sync(held, result, expire_after, connection)

    async def release(self, held: Held, connection: Any = None) -> bool:
        return self.release_sync(held, connection)

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        return self.extend_sync(held, lease, connection)
