"""The contenders of the idempotency benchmark and how one operation is timed
(``bench/idempotency.py`` runs them and reports).

Every claim hashes the same payload, the event as a consumer gets it (``order_event``): ours with
``payload=`` (SHA-256 of its canonical JSON), Powertools' (MD5 of its JSON, its default hash)
either for payload validation or as the key (``powertools_op``). The bare rows write the id
alone: the floor under any claim.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import psycopg
import redis
from idempotent_consumer import Idempotency, SyncIdempotency

from bench.measure import percentile

CONCURRENCY = 16


def order_event(event_id: str) -> dict[str, Any]:
    """The payload every claim hashes: a small order event, as a consumer receives it."""
    return {"id": event_id, "type": "Order Completed", "cents": 1299, "currency": "EUR"}


@dataclass
class Phase:
    ops: int
    seconds: float
    latencies_ms: list[float]

    @property
    def rate(self) -> float:
        return self.ops / self.seconds if self.seconds > 0 else 0.0

    def p(self, q: float) -> float:
        return percentile(self.latencies_ms, q) or 0.0


@dataclass
class Row:
    name: str
    server: str
    bare: str | None  # the row this one is compared with
    new: Phase
    repeat: Phase


Op = Callable[[str], object]
AsyncOp = Callable[[str], Awaitable[object]]


def timed(op: Op, ids: list[str]) -> Phase:
    latencies: list[float] = []
    started = time.perf_counter()
    for event_id in ids:
        t = time.perf_counter_ns()
        op(event_id)
        latencies.append((time.perf_counter_ns() - t) / 1e6)
    return Phase(len(ids), time.perf_counter() - started, latencies)


async def timed_async(op: AsyncOp, ids: list[str], concurrency: int) -> Phase:
    latencies: list[float] = []
    queue = list(reversed(ids))

    async def worker() -> None:
        while queue:
            event_id = queue.pop()
            t = time.perf_counter_ns()
            await op(event_id)
            latencies.append((time.perf_counter_ns() - t) / 1e6)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return Phase(len(ids), time.perf_counter() - started, latencies)


def add(
    rows: dict[str, Row], name: str, server: str, bare: str | None, new: Phase, repeat: Phase
) -> None:
    """Add one chunk's phases to the contender's row."""
    row = rows.get(name)
    if row is None:
        rows[name] = Row(name, server, bare, new, repeat)
        return
    for total, part in ((row.new, new), (row.repeat, repeat)):
        total.ops += part.ops
        total.seconds += part.seconds
        total.latencies_ms.extend(part.latencies_ms)


# -- the claims: the same op serves the new-id phase and the repeat phase -----------------


def sync_claim_op(idem: SyncIdempotency) -> Op:
    def op(event_id: str) -> object:
        with idem.claim(event_id, payload=order_event(event_id)) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


def joined_claim_op(idem: SyncIdempotency, conn: psycopg.Connection[Any]) -> Op:
    def op(event_id: str) -> object:
        # no transaction open on conn: the claim block is the transaction (BEGIN, claim,
        # complete, COMMIT); effects written on conn inside it commit with it
        with idem.claim(event_id, payload=order_event(event_id), connection=conn) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


def async_claim_op(idem: Idempotency) -> AsyncOp:
    async def op(event_id: str) -> object:
        async with idem.claim(event_id, payload=order_event(event_id)) as claim:
            if claim.done:
                return claim.result
            claim.complete("ch_" + event_id)
            return claim.result

    return op


#: repeats Powertools refused with IdempotencyValidationError, per contender (see below)
REFUSED: Counter[str] = Counter()


def powertools_op(client: redis.Redis, validate: bool) -> Op:
    """aws-lambda-powertools' ``idempotent_function`` on its Redis layer, outside Lambda (no
    lambda context: no in-progress lease, and it warns once), hashing the whole event.

    ``validate``: keyed by the id, the event hashed for payload validation
    (``payload_validation_jmespath="@"``), as our claims do. Its Redis layer drops that hash
    when it completes a record (``_update_record`` writes status, data and expiry only; the
    DynamoDB layer keeps it, and Powertools for TypeScript fixed the same in its cache layer,
    powertools-lambda-typescript#5705), so every repeat raises ``IdempotencyValidationError``
    after the same round trips; it is counted in ``REFUSED`` and timed like an answer.
    Without ``validate``: the whole event hashed as the key (Powertools' default), no check.
    """
    from aws_lambda_powertools.utilities.idempotency import (
        IdempotencyConfig,
        idempotent_function,
    )
    from aws_lambda_powertools.utilities.idempotency.exceptions import (
        IdempotencyValidationError,
    )
    from aws_lambda_powertools.utilities.idempotency.persistence.cache import (
        CachePersistenceLayer,
    )

    layer = CachePersistenceLayer(client=client)  # one layer per config: it configures once
    if validate:
        config = IdempotencyConfig(
            event_key_jmespath="id", payload_validation_jmespath="@", expires_after_seconds=3600
        )
    else:
        config = IdempotencyConfig(expires_after_seconds=3600)
    name = "powertools redis" + (" validated" if validate else " keyed by event")

    @idempotent_function(data_keyword_argument="event", persistence_store=layer, config=config)
    def handle(event: dict[str, Any]) -> str:
        return "ch_" + str(event["id"])

    def op(event_id: str) -> object:
        try:
            return handle(event=order_event(event_id))
        except IdempotencyValidationError:
            REFUSED[name] += 1
            return None

    return op
