"""A local cache of completed records in front of a store: a repeat answered in-process.

After Powertools' ``use_local_cache`` (aws_lambda_powertools/utilities/idempotency/
persistence/base.py, ``_save_to_cache`` / ``_retrieve_from_cache`` on its ``LRUDict``)::

    store = LocalCache(PostgresStore(dsn), max_items=10_000)
    idem = Idempotency(store, processor="billing")

Only what is final is cached: a completed record, as the store answered it to a claim made
outside any caller's transaction, or as this process completed it on its own (autocommitted).
Never an in-progress claim (its holder may still release it, or crash and be taken over), and
nothing a claim joined to a caller's transaction saw or did: a completion made there may still
roll back, and a claim there may read that transaction's own uncommitted completion (a repeat
in the same batch). It is cached when a later claim outside a transaction reads it back.
So the cache answers only "a repeat, here is the first result",
which the store would answer too: it can save round trips, never run an effect a second
time. A cached record answers a claim only with the same payload hash as it was cached with
(or with none); any other hash asks the store, which decides between a repeat and a
``PayloadMismatch``.

Bounded: at most ``max_items`` records, the least recently used goes first. Each record is
kept at most ``ttl`` (default: the claim's ``expire_after``) after it was cached, measured on
this process's monotonic clock; the store counts ``expire_after`` from the first claim, so a
cached repeat can be recognised up to that much longer than the store would. The cache lives
in one process: another process's completions reach it only through its own claims.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from ._base import ClaimReply, ClaimRequest, Held, Outcome, positive


@dataclass
class CacheStats:
    hits: int = 0  # claims answered from the cache (the store not asked)
    misses: int = 0  # claims passed to the store
    evictions: int = 0  # records dropped to stay within max_items


class _Entry:
    __slots__ = ("payload_hash", "result", "until")

    def __init__(self, payload_hash: bytes | None, result: bytes | None, until: float) -> None:
        self.payload_hash = payload_hash
        self.result = result
        self.until = until


class LocalCache:
    """A bounded LRU of completed records in front of ``store`` (a store itself, async and
    sync). Other attributes (``connection``, ``pool``, ``close`` ...) are the store's."""

    def __init__(self, store: Any, *, max_items: int = 1024, ttl: timedelta | None = None):
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, not {max_items}")
        self.store = store
        self.max_items = max_items
        self.ttl = positive(ttl, "ttl") if ttl is not None else None
        self.stats = CacheStats()
        self._records: OrderedDict[tuple[str, str], _Entry] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def max_expire_after(self) -> timedelta | None:
        limit: timedelta | None = getattr(self.store, "max_expire_after", None)
        return limit

    def __getattr__(self, name: str) -> Any:
        if name == "store":  # not set yet: never recurse
            raise AttributeError(name)
        return getattr(self.store, name)

    @property
    def size(self) -> int:
        """Records cached now. (Not ``__len__``: an empty cache must not be falsy, or
        ``cache or store`` would silently bypass it.)"""
        return len(self._records)

    # -- the cache --------------------------------------------------------------------------

    def _lookup(self, request: ClaimRequest) -> ClaimReply | None:
        key = (request.processor, request.event_id)
        with self._lock:
            entry = self._records.get(key)
            if entry is not None and entry.until <= time.monotonic():
                del self._records[key]
                entry = None
            ours = request.payload_hash
            if entry is None or (ours is not None and entry.payload_hash != ours):
                self.stats.misses += 1
                return None
            self._records.move_to_end(key)
            self.stats.hits += 1
            return ClaimReply(Outcome.COMPLETED, result=entry.result)

    def _remember(
        self,
        processor: str,
        event_id: str,
        payload_hash: bytes | None,
        result: bytes | None,
        expire_after: timedelta,
    ) -> None:
        keep = min(expire_after, self.ttl) if self.ttl is not None else expire_after
        entry = _Entry(payload_hash, result, time.monotonic() + keep.total_seconds())
        key = (processor, event_id)
        with self._lock:
            self._records[key] = entry
            self._records.move_to_end(key)
            while len(self._records) > self.max_items:
                self._records.popitem(last=False)
                self.stats.evictions += 1

    def _forget(self, held: Held) -> None:
        with self._lock:
            self._records.pop((held.processor, held.event_id), None)

    def _claimed(self, request: ClaimRequest, reply: ClaimReply, connection: Any) -> ClaimReply:
        # Read on the caller's connection, a completed record may be its transaction's own
        # uncommitted row: cached, a rollback would leave a "done" for an effect never made.
        if reply.outcome is Outcome.COMPLETED and connection is None:
            self._remember(
                request.processor,
                request.event_id,
                request.payload_hash,
                reply.result,
                request.expire_after,
            )
        return reply

    def _completed(
        self, ok: bool, held: Held, result: bytes, expire_after: timedelta, connection: Any
    ) -> bool:
        # Joined to a caller's transaction the completion is not committed yet: a rollback
        # would leave a cached "done" for an effect that never happened.
        if ok and connection is None:
            self._remember(held.processor, held.event_id, held.payload_hash, result, expire_after)
        return ok

    # -- the async store --------------------------------------------------------------------

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        hit = self._lookup(request)
        if hit is not None:
            return hit
        return self._claimed(request, await self.store.claim(request, connection), connection)

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        ok = bool(await self.store.complete(held, result, expire_after, connection))
        return self._completed(ok, held, result, expire_after, connection)

    async def release(self, held: Held, connection: Any = None) -> bool:
        self._forget(held)
        return bool(await self.store.release(held, connection))

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        return bool(await self.store.extend(held, lease, connection))

    # -- the sync store ---------------------------------------------------------------------

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        hit = self._lookup(request)
        if hit is not None:
            return hit
        return self._claimed(request, self.store.claim_sync(request, connection), connection)

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        ok = bool(self.store.complete_sync(held, result, expire_after, connection))
        return self._completed(ok, held, result, expire_after, connection)

    def release_sync(self, held: Held, connection: Any = None) -> bool:
        self._forget(held)
        return bool(self.store.release_sync(held, connection))

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        return bool(self.store.extend_sync(held, lease, connection))
