"""The smaller defects of issue 46, each on the store it concerns (real Redis and PostgreSQL).

* a RedisStore built from the caller's own sync and async clients: every operation works,
  a stale holder's release is refused with ``LeaseLost``, a complete after the lease ended
  with nobody taking over keeps the result, and ``close()`` leaves the caller's clients open;
* a MemoryStore whose slots all hold live claims never evicts one: a new id waits, or gets
  ``AlreadyInProgress``, and every holder's complete lands;
* a result the serializer cannot store raises in the body and completes the claim with no
  result (the effect ran: the redelivery is a repeat), on every store; a body cancelled
  mid-effect keeps its claim until the lease ends, then a takeover runs it;
* a payload that is not a JSON value is refused before the claim, not hashed by ``str()``;
* bad event ids raise the library's ``InvalidEventId`` (an ``IdempotencyError``): a type
  it does not key (a tuple, None), a number that is not finite, a naive datetime, a str
  starting with the mark of the other types' keys.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    IdempotencyError,
    InvalidEventId,
    LeaseLost,
    MemoryStore,
    NotSerializable,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
    payload_hash,
)

from tests.idempotency.conftest import Servers
from tests.support import ROOT

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=300)


class Boom(Exception):
    pass


def test_redis_store_on_the_callers_own_sync_client(servers: Servers, prefix: str) -> None:
    client = redis.Redis.from_url(servers.redis_url)
    store = RedisStore(prefix=prefix, client=client)
    idem = SyncIdempotency(store, "own", lease=LEASE)
    with idem.claim("evt-1") as claim:
        claim.extend()
        claim.complete("r1")
    with idem.claim("evt-1") as again:
        assert again.done and again.result == "r1"
    with pytest.raises(Boom), idem.claim("evt-2"):
        raise Boom
    with idem.claim("evt-2") as rerun:  # released: runs again
        assert not rerun.done
    # a stale holder: its lease ended and another holder took the id over
    with pytest.raises(LeaseLost) as lost, idem.claim("evt-3"):
        time.sleep(LEASE.total_seconds() + 0.1)
        with idem.claim("evt-3") as successor:
            assert not successor.done
            raise Boom
    assert isinstance(lost.value.__context__, Boom)
    # lease ended, nobody took over: the result is kept, not thrown away
    with idem.claim("evt-4") as late:
        time.sleep(LEASE.total_seconds() + 0.1)
        late.complete("late")
    with idem.claim("evt-4") as repeat:
        assert repeat.done and repeat.result == "late"
    store.close_sync()
    assert client.ping()  # the caller's client is the caller's to close
    client.close()


async def test_redis_store_on_the_callers_own_async_client(servers: Servers, prefix: str) -> None:
    client = aioredis.Redis.from_url(servers.redis_url)
    store = RedisStore(prefix=prefix, async_client=client)
    idem = Idempotency(store, "own", lease=LEASE)
    async with idem.claim("evt-1") as claim:
        await claim.extend()
        claim.complete("r1")
    async with idem.claim("evt-1") as again:
        assert again.done and again.result == "r1"
    with pytest.raises(Boom):
        async with idem.claim("evt-2"):
            raise Boom
    async with idem.claim("evt-2") as rerun:
        assert not rerun.done
    with pytest.raises(LeaseLost):
        async with idem.claim("evt-3"):
            await asyncio.sleep(LEASE.total_seconds() + 0.1)
            async with idem.claim("evt-3") as successor:
                assert not successor.done
                raise Boom
    async with idem.claim("evt-4") as late:
        await asyncio.sleep(LEASE.total_seconds() + 0.1)
        late.complete("late")
    async with idem.claim("evt-4") as repeat:
        assert repeat.done and repeat.result == "late"
    await store.close()
    assert await client.ping()
    await client.aclose()


def test_memory_store_full_of_live_claims_evicts_none() -> None:
    store = MemoryStore(4)
    idem = SyncIdempotency(store, "mem", lease=timedelta(seconds=30))
    holders = [idem.claim(f"evt-{i}") for i in range(40)]
    entered: list[Any] = []
    refused: list[str] = []
    for i, ctx in enumerate(holders):
        try:
            entered.append((ctx, ctx.__enter__()))
        except AlreadyInProgress:
            refused.append(f"evt-{i}")
    # at most one live claim per slot; every other id was refused, none evicted a holder
    assert len(entered) <= 4 and len(refused) == 40 - len(entered), len(entered)
    assert store.metrics().evictions == 0
    for ctx, claim in entered:
        claim.complete("ok")
        ctx.__exit__(None, None, None)  # LeaseLost here would mean it was evicted
    # completed ids may be overwritten: the refused ids now get their slots
    with idem.claim(refused[-1], wait=timedelta(seconds=1)) as late:
        assert not late.done


def test_memory_store_a_crashed_holders_slot_is_free_once_its_lease_ends() -> None:
    store = MemoryStore(1)
    idem = SyncIdempotency(store, "mem", lease=LEASE)
    crashed = idem.claim("evt-a")
    crashed.__enter__()  # never exits: its holder died mid-handler
    with pytest.raises(AlreadyInProgress), idem.claim("evt-b"):
        pass
    started = time.monotonic()
    with idem.claim("evt-b", wait=timedelta(seconds=2)) as b:  # waits out evt-a's lease
        assert not b.done
    assert time.monotonic() - started > LEASE.total_seconds() / 2
    with pytest.raises(LeaseLost):  # the dead holder, back, cannot complete any more
        crashed.__exit__(None, None, None)


@pytest.fixture(params=["memory", "postgres", "redis"])
def any_store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore(1000)
    elif request.param == "postgres":
        store = PostgresStore(servers.dsn, table=table, max_size=2)
        yield store
        store.close_sync()
    else:
        rstore = RedisStore(servers.redis_url, prefix=prefix)
        yield rstore
        rstore.close_sync()


def test_a_result_that_is_not_json_completes_the_claim_without_it(any_store: Any) -> None:
    """1.0 released the claim when ``complete()`` refused the result: the effect had run, and
    the redelivery ran it again (a handler returning a ``Decimal`` charged twice)."""
    idem = SyncIdempotency(any_store, "ser", lease=timedelta(seconds=30))
    ran = 0
    with pytest.raises(NotSerializable, match="counts as done"), idem.claim("evt-1") as claim:
        ran += 1
        claim.complete(Decimal("12.50"))
    with idem.claim("evt-1") as again:  # the redelivery: a repeat, with no result kept
        assert again.done and again.result is None
    assert ran == 1


async def test_a_cancelled_body_keeps_its_claim_until_the_lease_ends(any_store: Any) -> None:
    """A body cancelled mid-effect (a timeout around the handler) may have charged: 1.0
    released the claim and the redelivery ran the effect at once, beside the first one's
    outcome. The claim now stays until its lease ends; then a takeover runs it."""
    lease = timedelta(milliseconds=800)
    idem = Idempotency(any_store, "cancel", lease=lease)
    started = asyncio.Event()

    async def slow_charge() -> None:
        async with idem.claim("evt-c") as claim:
            started.set()
            await asyncio.sleep(30)  # the provider is slow; the caller gives up
            claim.complete("charged")

    task = asyncio.create_task(slow_charge())
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    with pytest.raises(AlreadyInProgress):  # not released: its outcome is unknown
        async with idem.claim("evt-c"):
            pytest.fail("a cancelled claim was released")
    await asyncio.sleep(lease.total_seconds() + 0.2)
    async with idem.claim("evt-c") as takeover:
        assert not takeover.done
        if not isinstance(any_store, RedisStore):  # Redis: an expired lease leaves no count
            assert takeover.taken_over
        takeover.complete("charged once more, knowingly")


def test_a_payload_that_is_not_json_is_refused_before_the_claim(any_store: Any) -> None:
    idem = SyncIdempotency(any_store, "pay")
    with pytest.raises(NotSerializable), idem.claim("evt-1", payload={"tags": {"a", "b"}}):
        pass
    with idem.claim("evt-1", payload={"tags": ["a", "b"]}) as claim:
        assert not claim.done  # nothing was written for the refused claim


def test_payload_hash_is_the_same_in_every_process() -> None:
    """A set's order follows the process's hash seed: a str() of it would hash differently
    in the next process, and a true repeat would be refused as a payload mismatch."""
    code = (
        "from idempotent_consumer import payload_hash; print(payload_hash({'n': [1, 'x']}).hex())"
    )
    hashes = {
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=ROOT,
            env={"PYTHONHASHSEED": str(seed), "PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        for seed in range(3)
    }
    expected = payload_hash({"n": [1, "x"]})
    assert expected is not None and hashes == {expected.hex()}
    with pytest.raises(NotSerializable):
        payload_hash({"tags": set("abcdefgh")})


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "x" * 256,
        "a\x00b",
        b"\xff",
        10**300,  # a key past 255 characters
        ("order", 1),  # a composite id: the caller joins it
        None,
        float("nan"),
        Decimal("Infinity"),
        datetime(2024, 10, 27, 2, 30),  # naive: two instants where clocks turn back
        "\ufdd0int:1",  # the mark of the keys of other types: int 1's key
    ],
)
def test_bad_event_ids_raise_the_librarys_error(bad: Any) -> None:
    idem = SyncIdempotency(MemoryStore(10), "keys")
    with pytest.raises(InvalidEventId) as raised:
        idem.claim(bad)
    assert isinstance(raised.value, IdempotencyError)
