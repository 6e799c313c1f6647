"""The states of a claim, the same on every store, async and sync.

first run -> completed with its result; a repeat -> done, the first result, nothing runs;
another payload under the same id -> PayloadMismatch; a handler that raises -> released, the
redelivery runs once; a live claim -> AlreadyInProgress, or a wait until it completes; a
lease that ends -> taken over, and the old holder cannot complete or extend any more.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    LeaseLost,
    MemoryStore,
    PayloadMismatch,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
)

from tests.idempotency.conftest import Servers, open_store, open_sync_store

pytestmark = pytest.mark.idempotency

STORES = ["memory", "postgres", "redis"]
LEASE = timedelta(milliseconds=400)


@pytest.fixture(params=STORES)
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


@pytest.fixture(params=STORES)
def sync_store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> Iterator[Any]:
    with open_sync_store(request.param, servers, table, prefix) as s:
        yield s


class Boom(Exception):
    pass


async def test_first_run_then_repeats_get_its_result(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    runs = 0
    for _ in range(3):
        async with idem.claim("evt-1", payload={"amount": 5}) as claim:
            if claim.done:
                assert claim.result == {"charge": "ch_1"}
                continue
            runs += 1
            claim.complete({"charge": "ch_1"})
    assert runs == 1
    # another processor (consumer group) dedups on its own
    async with idem.for_processor("email").claim("evt-1") as claim:
        assert not claim.done
    async with idem.for_processor("email").claim("evt-1") as claim:
        assert claim.done and claim.result is None  # completed without complete(): None


async def test_same_id_other_payload_is_a_mismatch(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    async with idem.claim("evt-2", payload=b"amount=5") as claim:
        claim.complete("ch_2")
    with pytest.raises(PayloadMismatch):
        async with idem.claim("evt-2", payload=b"amount=500"):
            pytest.fail("the body must not run")
    async with idem.claim("evt-2") as claim:  # no payload given: no check
        assert claim.done and claim.result == "ch_2"


async def test_a_handler_that_raises_releases_then_runs_once(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=timedelta(seconds=30))
    with pytest.raises(Boom):
        async with idem.claim("evt-3"):
            raise Boom
    runs = 0
    for _ in range(2):
        async with idem.claim("evt-3") as claim:  # at once: not locked for 30 s
            if not claim.done:
                runs += 1
                claim.complete("ok")
    assert runs == 1


async def test_live_claim_is_in_progress_and_a_waiter_gets_the_result(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=timedelta(seconds=5))
    entered, release = asyncio.Event(), asyncio.Event()

    async def holder() -> None:
        async with idem.claim("evt-4") as claim:
            entered.set()
            await release.wait()
            claim.complete("first")

    task = asyncio.create_task(holder())
    await asyncio.wait_for(entered.wait(), 10)
    with pytest.raises(AlreadyInProgress):
        async with idem.claim("evt-4"):
            pytest.fail("must not run")
    with pytest.raises(AlreadyInProgress):
        async with idem.claim("evt-4", wait=timedelta(milliseconds=100)):
            pytest.fail("must not run")

    async def waiter() -> tuple[bool, Any]:
        async with idem.claim("evt-4", wait=True) as claim:
            return claim.done, claim.result

    waiting = asyncio.create_task(waiter())
    await asyncio.sleep(0.1)
    release.set()
    await task
    assert await waiting == (True, "first")


async def test_lease_ends_then_takeover_fences_the_old_holder(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    slow = idem.claim("evt-5")
    old = await slow.__aenter__()
    await old.extend(timedelta(milliseconds=600))  # a long handler extends its lease
    await asyncio.sleep(0.45)
    with pytest.raises(AlreadyInProgress):  # still live thanks to the extension
        async with idem.claim("evt-5"):
            pass
    await asyncio.sleep(0.3)
    async with idem.claim("evt-5") as new:
        assert not new.done
        if not isinstance(store, RedisStore):  # Redis: an expired lease leaves no count
            assert new.attempts == 2 and new.taken_over
        new.complete("second")
    with pytest.raises(LeaseLost):
        await old.extend()
    old.complete("first")
    with pytest.raises(LeaseLost):
        await slow.__aexit__(None, None, None)
    async with idem.claim("evt-5") as claim:
        assert claim.done and claim.result == "second"


async def test_once_runs_the_function_once(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    calls: list[int] = []

    async def charge() -> str:
        calls.append(1)
        return "ch_once"

    results = [await idem.once("evt-6", charge) for _ in range(3)]
    assert results == ["ch_once"] * 3 and len(calls) == 1


def test_sync_twin_same_rules(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing", lease=LEASE)
    with idem.claim("evt-7", payload="a") as claim:
        assert not claim.done
        claim.complete([1, 2])
    with idem.claim("evt-7", payload="a") as claim:
        assert claim.done and claim.result == [1, 2]
    with pytest.raises(PayloadMismatch), idem.claim("evt-7", payload="b"):
        pass
    with pytest.raises(Boom), idem.claim("evt-8"):
        raise Boom
    # a live claim in another thread: AlreadyInProgress, then a waiter gets its result
    entered, go = threading.Event(), threading.Event()

    def holder() -> None:
        with idem.claim("evt-8") as claim:
            entered.set()
            go.wait(5)
            claim.complete("threaded")

    t = threading.Thread(target=holder)
    t.start()
    assert entered.wait(5)
    with pytest.raises(AlreadyInProgress), idem.claim("evt-8"):
        pass
    threading.Timer(0.1, go.set).start()
    started = time.monotonic()
    with idem.claim("evt-8", wait=True) as claim:
        assert claim.done and claim.result == "threaded"
    assert time.monotonic() - started < 3
    t.join()
    assert idem.once("evt-9", lambda: "x") == "x" == idem.once("evt-9", lambda: "y")


def test_bad_ids_and_settings_are_refused() -> None:
    idem = SyncIdempotency(MemoryStore(10), "billing")
    for bad in ("", "x" * 256, "a\x00b"):
        with pytest.raises(ValueError):
            idem.claim(bad)
    with pytest.raises(TypeError):
        idem.claim(("order", 42))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="longer than the store keeps"):
        Idempotency(
            PostgresStore("postgresql://unused", retention=timedelta(days=1)),
            "billing",
            expire_after=timedelta(days=2),
        )
