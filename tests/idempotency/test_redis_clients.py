"""The clients a RedisStore is given, on the real Redis.

* A client made with ``decode_responses=True`` answers ``str``: every repeat failed an
  ``assert`` (and under ``python -O`` a completed id read as in progress, its effect run
  again). The store now refuses such a client when it is built, naming the setting.
* A store given only a sync client and used from async code (or the reverse) made its other
  client from the default URL, ``redis://127.0.0.1:6379/0``: another server than the caller's,
  silently. It now refuses, naming the argument to pass.
"""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis
from idempotent_consumer import Idempotency, RedisStore, SyncIdempotency

from tests.idempotency.conftest import Servers

pytestmark = pytest.mark.idempotency


def test_a_decoding_sync_client_is_refused_when_the_store_is_built(
    servers: Servers, prefix: str
) -> None:
    client = redis.Redis.from_url(servers.redis_url, decode_responses=True)
    with pytest.raises(ValueError, match=r"the client given decodes responses"):
        RedisStore(prefix=prefix, client=client)
    client.close()


async def test_a_decoding_async_client_is_refused_when_the_store_is_built(
    servers: Servers, prefix: str
) -> None:
    client = aioredis.Redis.from_url(servers.redis_url, decode_responses=True)
    with pytest.raises(ValueError, match=r"the async_client given decodes responses"):
        RedisStore(prefix=prefix, async_client=client)
    await client.aclose()


async def test_a_sync_client_only_store_refuses_async_use(servers: Servers, prefix: str) -> None:
    client = redis.Redis.from_url(servers.redis_url)
    store = RedisStore(prefix=prefix, client=client)
    with pytest.raises(TypeError, match=r"given only its client.*pass async_client= too"):
        await Idempotency(store, "p").once("e1", lambda: None)
    with SyncIdempotency(store, "p").claim("e1") as claim:  # the sync side works
        claim.complete("r")
    client.close()


async def test_an_async_client_only_store_refuses_sync_use(servers: Servers, prefix: str) -> None:
    client = aioredis.Redis.from_url(servers.redis_url)
    store = RedisStore(prefix=prefix, async_client=client)
    with (
        pytest.raises(TypeError, match=r"given only its async_client.*pass client= too"),
        SyncIdempotency(store, "p").claim("e2"),
    ):
        pass
    async with Idempotency(store, "p").claim("e2") as claim:
        claim.complete("r")
    await client.aclose()


def test_a_store_with_a_url_and_one_client_makes_the_other_from_the_url(
    servers: Servers, prefix: str
) -> None:
    client = redis.Redis.from_url(servers.redis_url)
    store = RedisStore(servers.redis_url, prefix=prefix, client=client)
    assert store.url == servers.redis_url
    assert RedisStore(prefix=prefix).url == "redis://127.0.0.1:6379/0"  # none given: default
    client.close()
