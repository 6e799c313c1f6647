"""A final refusal kept under its key, as Stripe keeps a failed request's answer: a repeat of
a declined charge answers the same decline without charging again. On PostgreSQL and Redis,
async and sync: ``claim.complete_error(result)``, and ``store_errors=`` on the decorators."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from idempotent_consumer import (
    Idempotency,
    StoredError,
    SyncIdempotency,
    idempotent_function,
)

from tests.idempotency.conftest import Servers, open_store, open_sync_store

pytestmark = pytest.mark.idempotency


class PaymentDeclined(Exception):
    pass


class Timeout(Exception):
    pass


@pytest.fixture(params=["postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


@pytest.fixture(params=["postgres", "redis"])
def sync_store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> Iterator[Any]:
    with open_sync_store(request.param, servers, table, prefix) as s:
        yield s


async def test_a_stored_error_result_answers_every_repeat(store: Any) -> None:
    idem = Idempotency(store, "billing")
    async with idem.claim("ch-1", payload={"cents": 500}) as claim:
        assert not claim.done
        claim.complete_error({"declined": "insufficient_funds"})
        assert claim.failed
    for _ in range(2):
        async with idem.claim("ch-1", payload={"cents": 500}) as claim:
            assert claim.done and claim.failed
            assert claim.result == {"declined": "insufficient_funds"}
    async with idem.claim("ch-2") as claim:  # an ordinary result is not an error
        claim.complete({"charge": "ch_2"})
    async with idem.claim("ch-2") as claim:
        assert claim.done and not claim.failed and claim.result == {"charge": "ch_2"}


def test_a_stored_error_result_answers_every_repeat_sync(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing")
    with idem.claim("ch-3") as claim:
        claim.complete_error("declined")
    with idem.claim("ch-3") as claim:
        assert claim.done and claim.failed and claim.result == "declined"


async def test_store_errors_raises_the_same_decline_without_running_again(store: Any) -> None:
    idem = Idempotency(store, "billing")
    runs: list[str] = []

    @idempotent_function(idem, key="order_id", store_errors=(PaymentDeclined,))
    async def charge(order_id: str, fail_with: type[Exception] | None) -> str:
        runs.append(order_id)
        if fail_with is not None:
            raise fail_with(f"{order_id} declined", 402)
        return f"ch_{order_id}"

    for _ in range(3):
        with pytest.raises(PaymentDeclined) as raised:
            await charge("o1", PaymentDeclined)
        assert raised.value.args == ("o1 declined", 402)
    assert runs == ["o1"]  # the decline is the answer: never charged twice
    # an error not listed is not an answer: the claim is released and a retry runs again
    with pytest.raises(Timeout):
        await charge("o2", Timeout)
    assert await charge("o2", None) == "ch_o2"
    assert runs == ["o1", "o2", "o2"]

    # the class no longer listed: the repeat still refuses, with what was stored
    @idempotent_function(idem, key="order_id", name=charge.__module__ + "." + charge.__qualname__)
    async def charge_v2(order_id: str, fail_with: type[Exception] | None) -> str:
        runs.append(order_id)
        return "charged"

    with pytest.raises(StoredError) as stored:
        await charge_v2("o1", None)
    assert stored.value.arguments == ["o1 declined", 402]
    assert runs == ["o1", "o2", "o2"]


def test_store_errors_sync(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "billing")
    runs: list[str] = []

    @idempotent_function(idem, key="order_id", store_errors=(PaymentDeclined,))
    def charge(order_id: str) -> str:
        runs.append(order_id)
        raise PaymentDeclined(order_id)

    for _ in range(2):
        with pytest.raises(PaymentDeclined, match="o3"):
            charge("o3")
    assert runs == ["o3"]
