"""The decorators on the real PostgreSQL and Redis, async and sync: a function runs once per
key, a repeat returns the first result (through ``on_repeat`` when given), another payload is
``PayloadMismatch``, a function that raises runs again, and ``IDEMPOTENT_CONSUMER_DISABLED``
switches all of it off (nothing written to the store). Each function keeps its records in a
namespace of its own (its qualified name, or ``name=``); int and UUID keys.

Methods: the decorated function binds as a function does, so a method is known by how it is
called, not by its first parameter's name (``@idempotent`` took a method whose first
parameter is ``this`` for a function, and its ``self`` for the record), and ``key=`` /
``payload=`` callables get the same arguments on a method as on a function (with
``idempotent_function`` they got ``self`` first); ``@staticmethod`` and ``@classmethod``
above or below it. ``on_repeat`` is called for every repeat, a stored error's too (the
decorators skipped it there), and the error is raised again after it."""

from __future__ import annotations

import asyncio
import inspect
import pickle
import types
import uuid
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any

import pytest
from idempotent_consumer import (
    DISABLED_ENV,
    Idempotency,
    IdempotencyDisabledWarning,
    InvalidEventId,
    MemoryStore,
    PayloadMismatch,
    PostgresStore,
    RedisStore,
    Repeat,
    SyncIdempotency,
    idempotent,
    idempotent_function,
)

from tests.idempotency.conftest import Servers, open_store

pytestmark = pytest.mark.idempotency


@pytest.fixture(params=["postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


async def test_async_function_runs_once_per_key(store: Any) -> None:
    idem = Idempotency(store, "billing")
    runs: list[tuple[str, int]] = []

    @idempotent_function(idem, key="order_id", payload="order")
    async def charge(order_id: str, order: dict[str, int]) -> dict[str, Any]:
        runs.append((order_id, order["cents"]))
        return {"charge": f"ch_{order_id}", "cents": order["cents"]}

    first = await charge("o1", {"cents": 500})
    again = await charge(order_id="o1", order={"cents": 500})  # keyword or positional: one key
    assert first == again == {"charge": "ch_o1", "cents": 500}
    assert runs == [("o1", 500)]
    with pytest.raises(PayloadMismatch):
        await charge("o1", {"cents": 900})
    assert await charge("o2", {"cents": 1}) == {"charge": "ch_o2", "cents": 1}
    assert runs == [("o1", 500), ("o2", 1)]


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_sync_function_runs_once_per_key(
    servers: Servers, table: str, prefix: str, kind: str
) -> None:
    store: Any
    if kind == "postgres":
        store = PostgresStore(servers.dsn, table=table, max_size=2)
    else:
        store = RedisStore(servers.redis_url, prefix=prefix)
    idem = SyncIdempotency(store, "mailer")
    sent: list[str] = []

    @idempotent_function(idem, key=lambda user, subject: f"{user}/{subject}")
    def send(user: str, subject: str) -> str:
        sent.append(user)
        return f"msg-{user}"

    assert send("ann", "welcome") == send("ann", "welcome") == "msg-ann"
    assert send("ann", "receipt") == "msg-ann"
    assert sent == ["ann", "ann"]  # two keys, each once
    store.close_sync()


async def test_a_function_that_raises_runs_again(store: Any) -> None:
    idem = Idempotency(store, "billing")
    attempts: list[int] = []

    @idempotent_function(idem, key="order_id")
    async def flaky(order_id: str) -> str:
        attempts.append(1)
        if len(attempts) == 1:
            raise ConnectionError("payment provider down")
        return "ok"

    with pytest.raises(ConnectionError):
        await flaky("o3")
    assert await flaky("o3") == "ok"
    assert await flaky("o3") == "ok"
    assert len(attempts) == 2


async def test_on_repeat_gets_the_stored_result(store: Any) -> None:
    idem = Idempotency(store, "billing")
    seen: list[tuple[Any, bool]] = []

    async def on_repeat(repeat: Repeat) -> str:
        seen.append((repeat.result, repeat.claim.done))
        return f"repeat of {repeat.result}"

    @idempotent_function(idem, key="order_id", on_repeat=on_repeat)
    async def charge(order_id: str) -> str:
        return f"ch_{order_id}"

    assert await charge("o4") == "ch_o4"
    assert seen == []  # not called on the first run
    assert await charge("o4") == "repeat of ch_o4"
    assert seen == [("ch_o4", True)]


async def test_idempotent_keys_a_kafka_record_by_its_key(store: Any) -> None:
    idem = Idempotency(store, "billing")
    handled: list[bytes] = []

    @idempotent(idem)
    async def handle(record: Any) -> str:
        handled.append(record.value)
        return record.value.decode()

    record = SimpleNamespace(key=b"msg-1", value=b'{"amount": 5}')
    assert await handle(record) == await handle(record) == '{"amount": 5}'
    assert handled == [b'{"amount": 5}']
    with pytest.raises(PayloadMismatch):  # the same messageId with another body
        await handle(SimpleNamespace(key=b"msg-1", value=b'{"amount": 6}'))
    with pytest.raises(InvalidEventId):
        await handle(SimpleNamespace(key=None, value=b"{}"))


async def test_disabled_calls_the_function_and_writes_nothing(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    idem = Idempotency(store, "billing")
    runs: list[str] = []

    @idempotent_function(idem, key="order_id")
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        return f"ch_{len(runs)}"

    monkeypatch.setenv(DISABLED_ENV, "1")
    with pytest.warns(IdempotencyDisabledWarning):
        assert await charge("o5") == "ch_1"
    with pytest.warns(IdempotencyDisabledWarning):
        assert await charge("o5") == "ch_2"  # a repeat runs again: nothing guards it
    monkeypatch.setenv(DISABLED_ENV, "false")
    own = idem.scoped(f"{charge.__module__}.{charge.__qualname__}")  # the function's records
    async with own.claim("o5") as claim:  # and the store never saw the id
        assert not claim.done
        claim.complete("enabled")
    assert await charge("o5") == "enabled"
    assert runs == ["o5", "o5"]
    monkeypatch.setenv(DISABLED_ENV, "ture")
    with pytest.raises(ValueError, match=DISABLED_ENV):
        await charge("o5")


def test_wrong_decorations_are_refused_at_once(servers: Servers, prefix: str) -> None:
    store = RedisStore(servers.redis_url, prefix=prefix)
    with pytest.raises(TypeError, match="is async"):

        @idempotent_function(SyncIdempotency(store, "p"), key="k")
        async def a(k: str) -> None: ...

    with pytest.raises(TypeError, match="not async"):

        @idempotent_function(Idempotency(store, "p"), key="k")
        def b(k: str) -> None: ...

    with pytest.raises(TypeError, match="not a parameter"):

        @idempotent_function(Idempotency(store, "p"), key="order")
        async def c(k: str) -> None: ...

    store.close_sync()


async def test_two_functions_with_the_same_id_each_run_once(store: Any) -> None:
    """1.0 kept every decorated function's records under the bare processor: ``refund("o1")``
    returned ``charge("o1")``'s result without running, and a decorated function calling
    another with the same id raised PayloadMismatch (or waited on itself)."""
    idem = Idempotency(store, "billing")
    runs: list[str] = []

    @idempotent_function(idem, key="order_id", payload="cents")
    async def refund(order_id: str, cents: int) -> str:
        runs.append(f"refund {order_id}")
        return f"re_{order_id}"

    @idempotent_function(idem, key="order_id", payload="cents")
    async def charge(order_id: str, cents: int) -> str:
        runs.append(f"charge {order_id}")
        return f"ch_{order_id}"

    @idempotent_function(idem, key="order_id")
    async def settle(order_id: str) -> list[str]:  # nested decorated calls, one id
        return [await charge(order_id, 500), await refund(order_id, 200)]

    assert await charge("o1", 500) == "ch_o1"
    assert await refund("o1", 200) == "re_o1"  # its own record, not charge's
    assert await settle("o1") == ["ch_o1", "re_o1"]  # both repeats inside settle's claim
    assert runs == ["charge o1", "refund o1"]


def test_a_name_keeps_the_namespace_and_an_empty_one_the_bare_processor(
    servers: Servers, prefix: str
) -> None:
    store = RedisStore(servers.redis_url, prefix=prefix)
    idem = SyncIdempotency(store, "mailer")
    sent: list[str] = []

    @idempotent_function(idem, key="user", name="welcome-mail")
    def send(user: str) -> str:
        sent.append(user)
        return f"msg-{user}"

    @idempotent_function(idem, key="user", name="welcome-mail")
    def send_renamed(user: str) -> str:  # the same name: the same records
        sent.append(user)
        return "never"

    assert send("ann") == send_renamed("ann") == "msg-ann"
    with idem.scoped("welcome-mail").claim("ann") as claim:
        assert claim.done and claim.result == "msg-ann"

    @idempotent_function(idem, key="user", name="")
    def legacy(user: str) -> str:  # 1.0's keys: the bare processor
        return f"legacy-{user}"

    with idem.claim("bob") as claim:
        claim.complete("from 1.0")
    assert legacy("bob") == "from 1.0"
    assert sent == ["ann"]
    store.close_sync()


async def test_idempotent_on_a_method_and_keys_of_ints_and_uuids(store: Any) -> None:
    idem = Idempotency(store, "billing")
    order = uuid.UUID("12345678-1234-5678-1234-567812345678")

    class Billing:
        def __init__(self) -> None:
            self.handled: list[bytes] = []

        @idempotent(idem)
        async def handle(self, record: Any) -> str:
            self.handled.append(record.value)
            return record.value.decode()

        @idempotent_function(idem, key="order_id")
        async def charge(self, order_id: int | uuid.UUID) -> str:
            return f"ch_{order_id}"

    billing = Billing()
    record = SimpleNamespace(key=b"msg-7", value=b"{}")
    assert await billing.handle(record) == await billing.handle(record) == "{}"
    assert billing.handled == [b"{}"]
    assert await billing.charge(42) == await billing.charge(42) == "ch_42"
    assert await billing.charge(order) == f"ch_{order}"
    with pytest.raises(InvalidEventId):
        await billing.charge(("o", 4))  # type: ignore[arg-type]


# -- methods ----------------------------------------------------------------------------------


def order_key(order_id: str, cents: int = 0) -> str:
    """One key function for a function and a method alike."""
    return f"order-{order_id}"


async def test_a_method_is_known_by_how_it_is_called_not_by_its_first_parameters_name(
    store: Any,
) -> None:
    idem = Idempotency(store, "billing")

    class Billing:
        def __init__(self) -> None:
            self.runs: list[str] = []

        @idempotent(idem)
        async def handle(this, record: Any) -> str:
            this.runs.append(record.key.decode())
            return str(record.value.decode())

        @idempotent_function(idem, key=order_key, payload=lambda order_id, cents: cents)
        async def charge(self, order_id: str, cents: int) -> str:
            self.runs.append(order_id)
            return f"ch_{order_id}_{cents}"

    @idempotent_function(idem, key=order_key)
    async def charge(order_id: str, cents: int) -> str:  # the same key= on a function
        return f"fn_{order_id}"

    billing = Billing()
    record = SimpleNamespace(key=b"msg-1", value=b"{}")
    assert await billing.handle(record) == await billing.handle(record=record) == "{}"
    assert await billing.charge("o1", 500) == await billing.charge("o1", cents=500)
    assert await Billing.charge(billing, "o1", 500) == "ch_o1_500"  # called on the class
    with pytest.raises(PayloadMismatch):
        await billing.charge("o1", 900)
    assert await charge("o1", 1) == "fn_o1"  # a namespace of its own
    assert billing.runs == ["msg-1", "o1"]
    # records under <processor>/<module>.<qualified name>, as for a function
    own = idem.scoped(f"{__name__}.{Billing.charge.__qualname__}")
    assert Billing.charge.__qualname__.endswith("<locals>.Billing.charge")
    async with own.claim("order-o1") as claim:
        assert claim.done and claim.result == "ch_o1_500"


async def test_staticmethod_and_classmethod_above_or_below(store: Any) -> None:
    idem = Idempotency(store, "shop")
    calls: list[tuple[str, Any]] = []

    def key(order_id: str) -> str:
        return order_id

    class Shop:
        @staticmethod
        @idempotent_function(idem, key=key)
        async def static_above(order_id: str) -> str:
            calls.append(("static_above", order_id))
            return f"sa_{order_id}"

        @idempotent_function(idem, key=key)
        @staticmethod
        async def static_below(order_id: str) -> str:
            calls.append(("static_below", order_id))
            return f"sb_{order_id}"

        @classmethod
        @idempotent_function(idem, key=key)
        async def class_above(cls, order_id: str) -> str:
            calls.append(("class_above", cls))
            return f"ca_{cls.__name__}_{order_id}"

        @idempotent_function(idem, key=key)
        @classmethod
        async def class_below(cls, order_id: str) -> str:
            calls.append(("class_below", cls))
            return f"cb_{cls.__name__}_{order_id}"

    shop = Shop()
    for name in ("static_above", "static_below", "class_above", "class_below"):
        on_class, on_instance = getattr(Shop, name), getattr(shop, name)
        assert await on_class("o1") == await on_instance("o1") == await on_class("o1")
    assert calls == [
        ("static_above", "o1"),
        ("static_below", "o1"),
        ("class_above", Shop),
        ("class_below", Shop),
    ]
    # From Python 3.13 a classmethod calls what it wraps with the class first (no __get__):
    # the class is still taken for the owner, not given to key=.
    inner = vars(Shop)["class_above"].__func__
    assert await types.MethodType(inner, Shop)("o2") == "ca_Shop_o2"


def test_sync_methods_and_what_introspection_sees(servers: Servers, prefix: str) -> None:
    store = RedisStore(servers.redis_url, prefix=prefix)
    idem = SyncIdempotency(store, "mailer")

    class Mailer:
        @idempotent_function(idem, key=lambda user: user)
        def send(self, user: str) -> str:
            return f"msg-{user}-{id(self) == id(mailer)}"

    mailer = Mailer()
    assert mailer.send("ann") == Mailer.send(mailer, "ann") == "msg-ann-True"
    assert not inspect.iscoroutinefunction(mailer.send)
    assert str(inspect.signature(mailer.send)) == "(user: 'str') -> 'str'"
    assert Mailer.send.__name__ == "send" and Mailer.send.__doc__ is None
    aidem = Idempotency(store, "billing")

    @idempotent_function(aidem, key="order_id")
    async def charge(order_id: str) -> str:
        return order_id

    # frameworks choose between awaiting and a thread by this
    assert inspect.iscoroutinefunction(charge) and asyncio.iscoroutinefunction(charge)
    assert str(inspect.signature(charge)) == "(order_id: 'str') -> 'str'"
    assert charge.__wrapped__.__name__ == "charge"  # type: ignore[attr-defined]
    assert pickle.loads(pickle.dumps(module_level_send)) is module_level_send
    store.close_sync()


async def test_a_disabled_method_still_gets_its_self(
    store: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    idem = Idempotency(store, "billing")

    class Billing:
        @idempotent_function(idem, key=lambda order_id: order_id)
        async def charge(self, order_id: str) -> str:
            return f"{type(self).__name__} {order_id}"

    monkeypatch.setenv(DISABLED_ENV, "1")
    with pytest.warns(IdempotencyDisabledWarning) as warned:
        assert await Billing().charge("o1") == "Billing o1"
    assert warned[0].filename == __file__  # the warning points at the caller


# -- on_repeat for every repeat ---------------------------------------------------------------


class PaymentDeclined(Exception):
    pass


async def test_on_repeat_is_called_for_a_stored_error_which_is_then_raised_again(
    store: Any,
) -> None:
    idem = Idempotency(store, "billing")
    seen: list[tuple[Any, bool]] = []

    async def on_repeat(repeat: Repeat) -> str:
        seen.append((repeat.result, repeat.failed))
        return "from the hook"

    @idempotent_function(idem, key="order_id", on_repeat=on_repeat, store_errors=(PaymentDeclined,))
    async def charge(order_id: str, decline: bool) -> str:
        if decline:
            raise PaymentDeclined(order_id, "insufficient_funds")
        return f"ch_{order_id}"

    with pytest.raises(PaymentDeclined):
        await charge("o1", True)
    with pytest.raises(PaymentDeclined) as again:  # the hook ran; the decline stands
        await charge("o1", False)
    assert again.value.args == ("o1", "insufficient_funds")
    stored = {"error": f"{__name__}.PaymentDeclined", "args": ["o1", "insufficient_funds"]}
    assert seen == [(stored, True)]
    assert await charge("o2", False) == "ch_o2"
    assert await charge("o2", False) == "from the hook"  # a result's repeat: the hook's answer
    assert seen == [(stored, True), ("ch_o2", False)]

    def refuse(repeat: Repeat) -> None:
        if repeat.failed:
            raise LookupError(f"declined before: {repeat.result['args'][1]}")

    @idempotent_function(
        idem,
        key="order_id",
        on_repeat=refuse,
        store_errors=(PaymentDeclined,),
        name=f"{charge.__module__}.{charge.__qualname__}",
    )
    async def charge_v2(order_id: str, decline: bool) -> str:
        return "never"

    with pytest.raises(LookupError, match="insufficient_funds"):  # a hook that raises wins
        await charge_v2("o1", False)


def test_on_repeat_is_called_for_a_stored_error_sync(servers: Servers, table: str) -> None:
    store = PostgresStore(servers.dsn, table=table, max_size=2)
    idem = SyncIdempotency(store, "billing")
    seen: list[bool] = []

    @idempotent_function(
        idem,
        key="order_id",
        on_repeat=lambda repeat: seen.append(repeat.failed),
        store_errors=(PaymentDeclined,),
    )
    def charge(order_id: str) -> str:
        raise PaymentDeclined(order_id)

    for _ in range(3):
        with pytest.raises(PaymentDeclined, match="o1"):
            charge("o1")
    assert seen == [True, True]
    store.close_sync()


module_idem = SyncIdempotency(MemoryStore(100), "module")


@idempotent_function(module_idem, key="user")
def module_level_send(user: str) -> str:
    return user
