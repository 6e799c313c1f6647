"""Ids of every type, outcomes the body cannot know, and any processor name, on memory,
PostgreSQL and Redis:

* a body ended by a timeout (``TimeoutError``, or a class given in ``unknown_outcome=``)
  keeps its claim until the lease ends, and then a takeover runs it, as a cancelled body
  does: the timed-out call may have reached the provider, and releasing the claim let the
  redelivery charge again at once; ``unknown_outcome=()`` releases, as 1.0 did;
* an id may be a str, bytes, an int, bool, float, Decimal, UUID, date, aware datetime or an
  Enum member of those, through ``claim`` and the decorators alike; ``1``, ``"1"``, ``True``,
  ``1.0`` and ``Decimal("1")`` are five records (the decorators keyed ``1`` and ``"1"`` as
  one), and str ids keep the keys 1.0 wrote, byte for byte;
* a processor may hold ':' (a consumer group ``billing:v2``) on every store (Redis refused
  it at the first claim), and no two (processor, id) pairs share a record; processors 1.0
  accepted keep their Redis keys;
* ``MemoryStore`` closes as the other stores do (``close()``, ``close_sync()``);
* ``__version__`` is the installed distribution's, read from pyproject.toml.

Run: ``.venv/bin/python -m pytest -q tests/idempotency/test_ids_and_outcomes.py`` (the
servers from ``scripts/servers.sh up``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import enum
import importlib.metadata
import time
import tomllib
import uuid
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

import idempotent_consumer
import psycopg
import pytest
import redis
from idempotent_consumer import (
    AlreadyInProgress,
    Idempotency,
    MemoryStore,
    PostgresStore,
    RedisStore,
    SyncIdempotency,
    idempotent_function,
)

from tests.idempotency.conftest import Servers, open_store, open_sync_store
from tests.support import ROOT

pytestmark = pytest.mark.idempotency

LEASE = timedelta(milliseconds=600)


@pytest.fixture(params=["memory", "postgres", "redis"])
async def store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> AsyncIterator[Any]:
    async with open_store(request.param, servers, table, prefix) as s:
        yield s


@pytest.fixture(params=["memory", "postgres", "redis"])
def sync_store(
    request: pytest.FixtureRequest, servers: Servers, table: str, prefix: str
) -> Iterator[Any]:
    with open_sync_store(request.param, servers, table, prefix) as s:
        yield s


def counts_takeovers(store: Any) -> bool:
    return not isinstance(store, RedisStore)  # an expired Redis lease leaves no count


# -- outcomes the body cannot know ------------------------------------------------------------


async def test_a_timeout_in_the_body_keeps_the_claim_until_the_lease_ends(store: Any) -> None:
    idem = Idempotency(store, "timeouts", lease=LEASE)
    charges: list[str] = []

    async def provider_charge(order: str) -> None:
        charges.append(order)  # the charge lands; its answer does not come back in time
        await asyncio.sleep(5)

    with pytest.raises(TimeoutError):
        async with idem.claim("evt-t") as claim:
            await asyncio.wait_for(provider_charge("evt-t"), timeout=0.05)
            claim.complete("charged")
    with pytest.raises(AlreadyInProgress):  # not released: the charge may have happened
        async with idem.claim("evt-t"):
            pytest.fail("a timed-out claim was released: the redelivery charges again")
    await asyncio.sleep(LEASE.total_seconds() + 0.2)
    async with idem.claim("evt-t") as takeover:  # the lease ended: a takeover, counted
        assert not takeover.done
        if counts_takeovers(store):
            assert takeover.attempts == 2 and takeover.taken_over
        takeover.complete("reconciled with the provider")
    assert charges == ["evt-t"]


def test_a_timeout_in_a_sync_body_keeps_the_claim(sync_store: Any) -> None:
    idem = SyncIdempotency(sync_store, "timeouts", lease=LEASE)
    never = concurrent.futures.Future[str]()
    with pytest.raises(TimeoutError), idem.claim("evt-s"):
        never.result(timeout=0.01)  # a client waiting on an answer that does not come
    with pytest.raises(AlreadyInProgress), idem.claim("evt-s"):
        pytest.fail("a timed-out claim was released")
    time.sleep(LEASE.total_seconds() + 0.2)
    with idem.claim("evt-s") as takeover:
        assert not takeover.done
        if counts_takeovers(sync_store):
            assert takeover.attempts == 2


class ProviderTimeout(Exception):
    """An HTTP client's timeout that is no TimeoutError (as httpx's is not)."""


async def test_unknown_outcome_is_a_setting(store: Any) -> None:
    released = Idempotency(store, "as-in-1.0", lease=LEASE, unknown_outcome=())
    with pytest.raises(TimeoutError):
        async with released.claim("evt-1"):
            raise TimeoutError
    async with released.claim("evt-1") as again:  # released at once, as 1.0 did
        assert not again.done and again.attempts in (1, None)
    kept = Idempotency(store, "custom", lease=LEASE, unknown_outcome=(ProviderTimeout,))
    for idem in (kept, kept.for_processor("custom-2"), kept.scoped("fn")):
        assert idem.unknown_outcome == (ProviderTimeout,)
        with pytest.raises(ProviderTimeout):
            async with idem.claim("evt-2"):
                raise ProviderTimeout("read timed out")
        with pytest.raises(AlreadyInProgress):
            async with idem.claim("evt-2"):
                pass
        with pytest.raises(ConnectionError):  # an error known not to have charged
            async with idem.claim("evt-3"):
                raise ConnectionError("refused")
        async with idem.claim("evt-3") as retry:
            assert not retry.done
            retry.complete("ok")
    with pytest.raises(TypeError, match="unknown_outcome"):
        Idempotency(store, "bad", unknown_outcome=TimeoutError)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="unknown_outcome"):
        SyncIdempotency(store, "bad", unknown_outcome=(KeyboardInterrupt,))  # type: ignore[arg-type]


async def test_a_decorated_function_that_times_out_does_not_run_again_at_once(
    store: Any,
) -> None:
    idem = Idempotency(store, "billing", lease=LEASE)
    runs: list[str] = []

    @idempotent_function(idem, key="order_id", wait=False)
    async def charge(order_id: str) -> str:
        runs.append(order_id)
        if len(runs) == 1:
            raise TimeoutError("the provider did not answer")
        return f"ch_{order_id}"

    with pytest.raises(TimeoutError):
        await charge("o1")
    with pytest.raises(AlreadyInProgress):
        await charge("o1")
    assert runs == ["o1"]
    await asyncio.sleep(LEASE.total_seconds() + 0.2)
    assert await charge("o1") == "ch_o1"  # the takeover, once the lease ended
    assert runs == ["o1", "o1"]


# -- ids of every type ------------------------------------------------------------------------


class Status(enum.Enum):
    PAID = 1


class Color(enum.StrEnum):
    RED = "red"


ONE_OF_EACH: list[Any] = ["1", 1, True, 1.0, Decimal("1"), uuid.UUID(int=1), date(2001, 1, 1)]


async def test_ids_of_different_types_are_different_records(store: Any) -> None:
    idem = Idempotency(store, "types")
    for event_id in ONE_OF_EACH:
        async with idem.claim(event_id) as claim:
            assert not claim.done, f"{event_id!r} found another type's record"
            claim.complete(type(event_id).__name__)
    for event_id in ONE_OF_EACH:
        async with idem.claim(event_id) as claim:
            assert claim.done and claim.result == type(event_id).__name__


async def test_a_decorated_function_keys_1_and_str_1_apart(store: Any) -> None:
    idem = Idempotency(store, "types")
    runs: list[Any] = []

    @idempotent_function(idem, key="order_id")
    async def charge(order_id: Any) -> str:
        runs.append(order_id)
        return f"ch_{order_id!r}"

    assert await charge(1) == "ch_1"
    assert await charge("1") == "ch_'1'"  # 1.1 before this answered charge(1)'s result
    assert await charge(1) == "ch_1" and await charge("1") == "ch_'1'"
    assert runs == [1, "1"]


async def test_equal_values_of_one_type_are_one_record(store: Any) -> None:
    idem = Idempotency(store, "equal")
    plus_two = timezone(timedelta(hours=2))
    same: list[tuple[Any, Any]] = [
        ("order-1", b"order-1"),  # a Kafka key and its text
        (Decimal("12.50"), Decimal("12.5")),
        (datetime(2024, 3, 1, 12, tzinfo=UTC), datetime(2024, 3, 1, 14, tzinfo=plus_two)),
        (0.0, -0.0),
        (Status.PAID, 1),  # an enum names its value
        (Color.RED, "red"),
    ]
    for first, second in same:
        async with idem.claim(first) as claim:
            assert not claim.done
            claim.complete(repr(first))
        async with idem.claim(second) as claim:
            assert claim.done and claim.result == repr(first), (first, second)


async def test_str_ids_keep_the_keys_1_0_wrote_and_other_types_are_tagged(
    servers: Servers, table: str, prefix: str
) -> None:
    """The keys 1.0 wrote for str ids, pinned: a change would run every recorded id's effect
    again after an upgrade. The keys of other types are pinned too: they are stored."""
    pg = PostgresStore(servers.dsn, table=table, max_size=2)
    rs = RedisStore(servers.redis_url, prefix=prefix)
    for s in (pg, rs):
        idem = Idempotency(s, "billing")
        for event_id in ("order-1", "ord:2/ü", 42, uuid.UUID(int=7)):
            async with idem.claim(event_id) as claim:
                claim.complete("done")
    await pg.close()
    await rs.close()
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        rows = conn.execute(f"SELECT processor, event_id FROM {table} ORDER BY 2").fetchall()
    assert rows == [
        ("billing", "ord:2/ü"),
        ("billing", "order-1"),
        ("billing", "\ufdd0int:42"),
        ("billing", "\ufdd0uuid:00000000-0000-0000-0000-000000000007"),
    ]
    client = redis.Redis.from_url(servers.redis_url)
    keys = sorted(client.scan_iter(f"{prefix}*"))
    client.close()
    p = prefix.encode()
    assert keys == sorted(
        [
            p + b"billing:order-1",
            p + "billing:ord:2/ü".encode(),
            p + "billing:\ufdd0int:42".encode(),
            p + "billing:\ufdd0uuid:00000000-0000-0000-0000-000000000007".encode(),
        ]
    )


# -- any processor name -----------------------------------------------------------------------


async def test_any_processor_name_and_no_two_pairs_share_a_record(store: Any) -> None:
    # pairs that a separator of the processor from the id would join into one key
    pairs = [
        ("billing:v2", "e1"),
        ("billing", "v2:e1"),
        ("a:b", "c"),
        ("a", "b:c"),
        ("a\x1fb", "c"),
        ("a", "b\x1fc"),
        ("a\x00b", "c"),
    ]
    for processor, event_id in pairs[:-1]:
        idem = Idempotency(store, processor)
        async with idem.claim(event_id) as claim:
            assert not claim.done, f"({processor!r}, {event_id!r}) found another pair's record"
            claim.complete(f"{processor}|{event_id}")
    for processor, event_id in pairs[:-1]:
        async with Idempotency(store, processor).claim(event_id) as claim:
            assert claim.done and claim.result == f"{processor}|{event_id}"
    with pytest.raises(ValueError, match="NUL"):  # PostgreSQL's text cannot hold it
        Idempotency(store, pairs[-1][0])

    @idempotent_function(Idempotency(store, "group:v2"), key="order_id")
    async def charge(order_id: str) -> str:
        return f"ch_{order_id}"

    assert await charge("o1") == await charge("o1") == "ch_o1"


def test_redis_keys_of_the_processors_1_0_accepted_are_unchanged(
    servers: Servers, prefix: str
) -> None:
    store = RedisStore(servers.redis_url, prefix=prefix)
    assert store.key("billing", "order:1") == f"{prefix}billing:order:1"
    assert store.key("billing/app.charge", "o1") == f"{prefix}billing/app.charge:o1"
    # a processor with ':' gets the form no 1.0 processor could have (a NUL after the prefix)
    assert store.key("billing:v2", "o1") == f"{prefix}\x0010:billing:v2:o1"
    assert store.key("a:b", "c") != store.key("a", "b:c")
    idem = SyncIdempotency(store, "billing:v2")
    with idem.claim("o1") as claim:
        claim.complete("r")
    client = redis.Redis.from_url(servers.redis_url)
    assert client.exists(f"{prefix}\x0010:billing:v2:o1".encode()) == 1
    client.close()
    store.close_sync()


# -- MemoryStore closes like the others; the version --------------------------------------------


async def test_memory_store_closes_as_the_other_stores_do() -> None:
    store = MemoryStore(100)
    idem = Idempotency(store, "mem")
    async with idem.claim("e1") as claim:
        claim.complete("kept")
    await store.close()
    store.close_sync()
    async with idem.claim("e1") as again:  # nothing was closed: the records stay
        assert again.done and again.result == "kept"


def test_the_version_is_the_distributions_from_pyproject() -> None:
    pyproject = ROOT / "libs" / "idempotent-consumer" / "pyproject.toml"
    written = tomllib.loads(pyproject.read_text())["project"]["version"]
    assert idempotent_consumer.__version__ == written
    assert idempotent_consumer.__version__ == importlib.metadata.version("idempotent-consumer")
