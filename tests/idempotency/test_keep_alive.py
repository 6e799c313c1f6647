"""Fencing a long effect: the claim's token, and ``keep_alive`` renewing the lease.

A handler longer than its lease is taken over by the next claim of its id unless it renews
the lease; with ``claim.keep_alive()`` it is not, and a holder that was taken over anyway
learns it (``LeaseLost``): the async body is cancelled, the sync block raises at its end.
The other claim waits three leases (``wait=``): long enough for the lease to end if nothing
renews it, which the test without ``keep_alive`` shows.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from typing import Any

import pytest
from idempotent_consumer import AlreadyInProgress, Idempotency, LeaseLost, SyncIdempotency

from tests.idempotency.conftest import Servers, open_store, open_sync_store
from tests.idempotency.test_states import STORES

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=600)
PAST_THE_LEASE = LEASE * 3  # how long the second claim waits for the first one's lease to end


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


async def test_the_token_fences_a_holder_taken_over(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    first = idem.claim("evt-t")
    old = await first.__aenter__()
    assert re.fullmatch(r"[0-9a-f]{32}", old.token)
    async with idem.claim("evt-t", wait=PAST_THE_LEASE) as new:
        assert new.taken_over or new.attempts is None  # Redis keeps no count
        assert re.fullmatch(r"[0-9a-f]{32}", new.token) and new.token != old.token
        new.complete("second")
    with pytest.raises(LeaseLost):  # the store compares the token: the old holder is out
        await first.__aexit__(None, None, None)
    async with idem.claim("evt-t") as repeat:
        assert repeat.done
        with pytest.raises(RuntimeError, match="no token"):
            _ = repeat.token


async def _long_handler(idem: Idempotency, keep_alive: bool) -> tuple[Any, asyncio.Event]:
    """Start a holder of evt-k that runs until told to finish; return its task and the
    event that finishes it, once it holds the claim."""
    entered, finish = asyncio.Event(), asyncio.Event()

    async def holder() -> int:
        async with idem.claim("evt-k") as claim:
            if keep_alive:
                async with claim.keep_alive() as alive:
                    entered.set()
                    await finish.wait()
                renewals = alive.renewals
            else:
                entered.set()
                await finish.wait()
                renewals = 0
            claim.complete("first")
        return renewals

    task = asyncio.create_task(holder())
    await asyncio.wait_for(entered.wait(), 10)
    return task, finish


async def test_a_handler_longer_than_its_lease_with_keep_alive_is_not_taken_over(
    store: Any,
) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    task, finish = await _long_handler(idem, keep_alive=True)
    with pytest.raises(AlreadyInProgress):
        async with idem.claim("evt-k", wait=PAST_THE_LEASE):
            pytest.fail("the live holder was taken over")
    finish.set()
    renewals = await asyncio.wait_for(task, 10)
    assert renewals >= 1
    async with idem.claim("evt-k") as claim:
        assert claim.done and claim.result == "first"


async def test_a_handler_longer_than_its_lease_without_keep_alive_is_taken_over(
    store: Any,
) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    task, finish = await _long_handler(idem, keep_alive=False)
    async with idem.claim("evt-k", wait=PAST_THE_LEASE) as claim:
        assert not claim.done  # taken over: the effect runs a second time
        claim.complete("second")
    finish.set()
    with pytest.raises(LeaseLost):
        await asyncio.wait_for(task, 10)


async def test_keep_alive_of_a_claim_taken_over_cancels_the_body(store: Any) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    first = idem.claim("evt-l")
    old = await first.__aenter__()
    async with idem.claim("evt-l", wait=PAST_THE_LEASE) as new:
        assert not new.done
    cancelled = False
    with pytest.raises(LeaseLost):
        async with old.keep_alive(every=LEASE / 6):
            try:
                await asyncio.wait_for(asyncio.Event().wait(), 10)  # a long effect
            except asyncio.CancelledError:
                cancelled = True
                raise
    assert cancelled
    assert asyncio.current_task().cancelling() == 0  # type: ignore[union-attr]
    with pytest.raises(LeaseLost):
        await first.__aexit__(None, None, None)


def _sync_long_handler(
    idem: SyncIdempotency, event_id: str, keep_alive: bool
) -> tuple[threading.Thread, threading.Event, list[BaseException]]:
    """A thread holding ``event_id`` until told to finish; its failures end up in the list."""
    entered, finish = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def holder() -> None:
        try:
            with idem.claim(event_id) as claim:
                if keep_alive:
                    with claim.keep_alive() as alive:
                        entered.set()
                        finish.wait(30)
                    assert alive.renewals >= 1
                else:
                    entered.set()
                    finish.wait(30)
                claim.complete("first")
        except BaseException as exc:
            failures.append(exc)

    thread = threading.Thread(target=holder)
    thread.start()
    assert entered.wait(10)
    return thread, finish, failures


def test_sync_keep_alive_is_not_taken_over(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing", lease=LEASE)
    thread, finish, failures = _sync_long_handler(idem, "evt-s", keep_alive=True)
    with (
        pytest.raises(AlreadyInProgress),
        idem.claim("evt-s", wait=PAST_THE_LEASE),
    ):
        pytest.fail("the live holder was taken over")
    finish.set()
    thread.join(10)
    assert failures == []
    with idem.claim("evt-s") as claim:
        assert claim.done and claim.result == "first"


def test_sync_without_keep_alive_is_taken_over(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing", lease=LEASE)
    thread, finish, failures = _sync_long_handler(idem, "evt-s", keep_alive=False)
    with idem.claim("evt-s", wait=PAST_THE_LEASE) as claim:
        assert not claim.done
        claim.complete("second")
    finish.set()
    thread.join(10)
    assert [type(f) for f in failures] == [LeaseLost]
    with idem.claim("evt-s") as claim:
        assert claim.done and claim.result == "second"


def test_sync_keep_alive_of_a_claim_taken_over_raises_lease_lost(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing", lease=LEASE)
    first = idem.claim("evt-m")
    old = first.__enter__()
    with idem.claim("evt-m", wait=PAST_THE_LEASE) as new:
        assert not new.done
    seen = threading.Event()
    with pytest.raises(LeaseLost), old.keep_alive(every=LEASE / 6) as alive:
        for _ in range(1000):  # at most 10 s: the first renewal finds the claim lost
            if alive.lost is not None or seen.wait(0.01):
                break
        with pytest.raises(LeaseLost):
            alive.check()  # a long effect stops between two steps
    with pytest.raises(LeaseLost):
        first.__exit__(None, None, None)


def test_keep_alive_every_must_be_shorter_than_the_lease(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing", lease=LEASE)
    with idem.claim("evt-v") as claim:
        refused = pytest.raises(ValueError, match="shorter than the lease")
        with refused:
            claim.keep_alive(every=LEASE)
