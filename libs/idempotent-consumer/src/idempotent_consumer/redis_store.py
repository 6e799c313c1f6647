"""Redis store (redis-py): ``SET key value NX GET PX lease`` is the claim.

One key per (processor, event id): ``<prefix><processor>:<event id>``, or, for a processor
holding ':' (a consumer group ``billing:v2``), ``<prefix>\\0<length>:<processor>:<event id>``
(see :meth:`RedisStore.key`). Its value is a fixed header and the result::

    state (1: 'p' in progress, 'c' completed) | token (32 hex) | payload hash (64 hex or '-')
    | serialized result (completed)

The claim is one round trip: ``SET ... NX GET`` (Redis 7.0+) either sets the in-progress
value and answers nil (the claim is ours) or leaves the key alone and answers its value (a
repeat, a live claim, or a payload mismatch, read from the header). The in-progress key
expires with the lease, on Redis's clock: a crashed holder's key vanishes when its lease ends
and the next ``SET NX`` takes the event over, atomically, with nothing to clean up (so a
takeover leaves no count: ``claim.attempts`` is None on Redis). Completing, releasing and
extending are Lua scripts that act only while the key still holds the caller's token, so a
holder whose lease ended cannot overwrite or delete its successor's claim.

Durability, plainly: Redis answers before anything is on disk. What a restart loses depends
on its persistence settings, and lost records mean repeats run again:

* no persistence (``save ""``, ``appendonly no``): every record is lost on any restart;
* RDB snapshots only: every record written since the last snapshot is lost on a crash
  (kill -9, power loss); a clean SHUTDOWN saves first and loses nothing;
* AOF with ``appendfsync everysec`` (what ``scripts/servers.sh`` runs): a crash of the
  process loses nothing that was acknowledged (the write reached the kernel before the
  reply), a crash of the machine loses up to about one second;
* AOF with ``appendfsync always``: nothing acknowledged is lost, at a cost per write;
* a replica promoted after a failover lacks what had not replicated yet (replication is
  asynchronous; ``WAIT`` narrows it, does not close it);
* eviction: under ``maxmemory`` with an evicting policy, records go early; use
  ``maxmemory-policy noeviction`` so a full Redis refuses claims instead.

When a repeat running twice is unacceptable, use the PostgreSQL store, joined to the
effect's transaction.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import redis
import redis.asyncio as aioredis

from ._base import ClaimReply, ClaimRequest, Held, Outcome, millis

_HASH_LEN = 64
_HEADER = 1 + 32 + _HASH_LEN

# KEYS[1] the record; ARGV[1] 'p' .. token (the in-progress header prefix of the holder).
# Completing also stores the result when the key is gone: the lease ended and nobody took
# the event over, so this holder's run is still the only one (PostgreSQL accepts it too,
# its row outlives the lease); throwing the result away would run the effect again.
_COMPLETE = """
local v = redis.call('GET', KEYS[1])
if (not v) or string.sub(v, 1, 33) == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 33) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
"""
_EXTEND = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, 33) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""

_SCRIPTS = (("complete", _COMPLETE), ("release", _RELEASE), ("extend", _EXTEND))


def _hash_hex(digest: bytes | None) -> bytes:
    return digest.hex().encode() if digest is not None else b"-" * _HASH_LEN


def _value(state: bytes, token: str, digest: bytes | None, result: bytes = b"") -> bytes:
    return state + token.encode() + _hash_hex(digest) + result


#: Where a RedisStore given neither a url nor a client connects.
DEFAULT_URL = "redis://127.0.0.1:6379/0"


class RedisStore:
    """Idempotency records in Redis 7+ (see the module docstring for what a restart loses).

    ``url``: ``redis://host:port/db`` (default :data:`DEFAULT_URL`). ``prefix``: of every key.
    Clients are made from the URL on first use (sync and async separately), or pass your own
    ``client`` / ``async_client``: the store registers its scripts on them and never closes
    them (``close()`` closes only the clients it made). Given only one of them and no ``url``,
    the store refuses the other kind of use rather than connect to the default URL, another
    server than the caller's. Clients must answer bytes (``decode_responses=False``, redis-py's
    default): records hold binary results.
    """

    #: records expire on their own (PX): any expire_after works
    max_expire_after: timedelta | None = None

    def __init__(
        self,
        url: str | None = None,
        *,
        prefix: str = "idem:",
        client: redis.Redis | None = None,
        async_client: aioredis.Redis | None = None,
    ) -> None:
        for given, name in ((client, "client"), (async_client, "async_client")):
            if given is not None and given.get_connection_kwargs().get("decode_responses"):
                raise ValueError(
                    f"RedisStore: the {name} given decodes responses (decode_responses=True); "
                    "records hold binary results: pass a client made with "
                    "decode_responses=False (redis-py's default), or a url"
                )
        #: where the store's own clients connect; None: only the caller's clients are used
        if url is None and client is None and async_client is None:
            url = DEFAULT_URL
        self.url = url
        self.prefix = prefix
        self._client = client
        self._async_client = async_client
        self._own_client = client is None
        self._own_async_client = async_client is None
        self._scripts: dict[str, Any] = {}
        self._async_scripts: dict[str, Any] = {}

    def key(self, processor: str, event_id: str) -> str:
        """``<prefix><processor>:<event id>``: the first ':' after the prefix ends the
        processor, and the event id may hold more. A processor holding ':' cannot be split
        there, so its key is ``<prefix>\\0<length of the processor>:<processor>:<event id>``:
        the length says where the processor ends, and the NUL, which no processor holds
        (``check_processor``), keeps these keys apart from the first form. Processors
        without ':' (all that 1.0 accepted) keep 1.0's keys, byte for byte."""
        if ":" not in processor:
            return f"{self.prefix}{processor}:{event_id}"
        return f"{self.prefix}\x00{len(processor)}:{processor}:{event_id}"

    def _url_for(self, kind: str, given: str) -> str:
        if self.url is None:
            raise TypeError(
                f"RedisStore was given only its {given} and no url: for {kind} use pass "
                f"{'client' if kind == 'sync' else 'async_client'}= too, or a url"
            )
        return self.url

    @property
    def client(self) -> redis.Redis:
        if self._client is None:
            self._client = redis.Redis.from_url(self._url_for("sync", "async_client"))
        # Registered here, not where the client is made: a caller's own client needs the
        # scripts too (registering only computes their SHA1; EVALSHA loads on a miss).
        if not self._scripts:
            for name, lua in _SCRIPTS:
                self._scripts[name] = self._client.register_script(lua)
        return self._client

    @property
    def async_client(self) -> aioredis.Redis:
        if self._async_client is None:
            self._async_client = aioredis.Redis.from_url(self._url_for("async", "client"))
        if not self._async_scripts:
            for name, lua in _SCRIPTS:
                self._async_scripts[name] = self._async_client.register_script(lua)
        return self._async_client

    async def close(self) -> None:
        if self._async_client is not None and self._own_async_client:
            await self._async_client.aclose()
            self._async_client = None
            self._async_scripts.clear()
        self.close_sync()

    def close_sync(self) -> None:
        if self._client is not None and self._own_client:
            self._client.close()
            self._client = None
            self._scripts.clear()

    @staticmethod
    def _no_connection(connection: Any) -> None:
        if connection is not None:
            raise TypeError("RedisStore cannot join a database transaction (use PostgresStore)")

    @staticmethod
    def _reply(request: ClaimRequest, old: object) -> ClaimReply:
        # SET ... NX GET answers the old value (bytes), or nil when it set ours
        if old is None:
            return ClaimReply(Outcome.ACQUIRED)
        if not isinstance(old, bytes):  # a check, not an assert: python -O keeps it
            raise TypeError(
                f"RedisStore: the client answered {type(old).__name__}, not bytes: make it "
                "with decode_responses=False (redis-py's default)"
            )
        stored = old[1 + 32 : _HEADER]
        if (
            request.payload_hash is not None
            and stored != b"-" * _HASH_LEN
            and stored != _hash_hex(request.payload_hash)
        ):
            return ClaimReply(Outcome.MISMATCH)
        if old[:1] == b"c":
            return ClaimReply(Outcome.COMPLETED, result=old[_HEADER:])
        return ClaimReply(Outcome.IN_PROGRESS)

    # -- async ----------------------------------------------------------------------------

    async def claim(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        self._no_connection(connection)
        key = self.key(request.processor, request.event_id)
        value = _value(b"p", request.token, request.payload_hash)
        old = await self.async_client.set(key, value, nx=True, get=True, px=millis(request.lease))
        return self._reply(request, old)

    async def complete(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        self._no_connection(connection)
        client = self.async_client
        value = _value(b"c", held.token, held.payload_hash, result)
        done = await self._async_scripts["complete"](
            keys=[self.key(held.processor, held.event_id)],
            args=[b"p" + held.token.encode(), value, millis(expire_after)],
            client=client,
        )
        return bool(done)

    async def release(self, held: Held, connection: Any = None) -> bool:
        self._no_connection(connection)
        client = self.async_client
        done = await self._async_scripts["release"](
            keys=[self.key(held.processor, held.event_id)],
            args=[b"p" + held.token.encode()],
            client=client,
        )
        return bool(done)

    async def extend(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        self._no_connection(connection)
        client = self.async_client
        done = await self._async_scripts["extend"](
            keys=[self.key(held.processor, held.event_id)],
            args=[b"p" + held.token.encode(), millis(lease)],
            client=client,
        )
        return bool(done)

    # -- sync -----------------------------------------------------------------------------

    def claim_sync(self, request: ClaimRequest, connection: Any = None) -> ClaimReply:
        self._no_connection(connection)
        key = self.key(request.processor, request.event_id)
        value = _value(b"p", request.token, request.payload_hash)
        old = self.client.set(key, value, nx=True, get=True, px=millis(request.lease))
        return self._reply(request, old)

    def complete_sync(
        self, held: Held, result: bytes, expire_after: timedelta, connection: Any = None
    ) -> bool:
        self._no_connection(connection)
        client = self.client
        value = _value(b"c", held.token, held.payload_hash, result)
        return bool(
            self._scripts["complete"](
                keys=[self.key(held.processor, held.event_id)],
                args=[b"p" + held.token.encode(), value, millis(expire_after)],
                client=client,
            )
        )

    def release_sync(self, held: Held, connection: Any = None) -> bool:
        self._no_connection(connection)
        client = self.client
        return bool(
            self._scripts["release"](
                keys=[self.key(held.processor, held.event_id)],
                args=[b"p" + held.token.encode()],
                client=client,
            )
        )

    def extend_sync(self, held: Held, lease: timedelta, connection: Any = None) -> bool:
        self._no_connection(connection)
        client = self.client
        return bool(
            self._scripts["extend"](
                keys=[self.key(held.processor, held.event_id)],
                args=[b"p" + held.token.encode(), millis(lease)],
                client=client,
            )
        )
