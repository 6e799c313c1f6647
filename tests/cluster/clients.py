"""The pipeline's other clients as the cluster tier drives them: Segment-style HTTP clients that
post batches to the ingest service and retry like Segment's SDK, and the idempotent-consumer
library's Kafka glue running in a thread of the test process.

The HTTP retry rule follows segmentio/analytics-python (segment/analytics/consumer.py,
``Consumer.request``): a network error, 408, 429 and any 5xx but 501/505 are retried with the
same body, the first retry at once and then after 0.5 s, 1 s, 2 s...; any other status is
final. A 503 from the ingest service (Kafka did not acknowledge every event in time) is such a
retry, so a request that was written part way reaches Kafka twice: the workers drop the copies.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from idempotent_consumer import PostgresStore
from idempotent_consumer.kafka import ConsumerStats, IdempotentConsumer

from tests.ingest.support import json_headers

#: Statuses Segment's SDK sends again (0: no answer at all, a network error or a timeout).
RETRIED = {0, 408, 410, 429, 460} | (set(range(500, 600)) - {501, 505})
#: Segment's SDKs give up on a request after 15 s.
HTTP_TIMEOUT = aiohttp.ClientTimeout(total=15)


@dataclass
class HttpFeed:
    """Posts ``bodies`` (JSON batches) to ``url``/v1/batch, spread evenly over ``seconds``, from a
    background thread, at most ``in_flight`` requests at once (several SDK clients). Every
    ``resend_every``-th body is posted a second time once answered 200: a client whose answer
    was lost on the way back."""

    url: str
    bodies: Sequence[bytes]
    seconds: float
    resend_every: int = 10
    in_flight: int = 8
    statuses: Counter[int] = field(default_factory=Counter)
    resent: int = 0
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def flowing(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def join(self, timeout: float = 300) -> None:
        assert self.thread is not None
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"the HTTP feed did not end in {timeout}s"
        if self.error is not None:
            raise AssertionError(f"the HTTP feed failed: {self.error!r}") from self.error

    @property
    def retries(self) -> int:
        """Attempts answered otherwise than 200, each sent again."""
        return sum(n for status, n in self.statuses.items() if status != 200)

    def _run(self) -> None:
        try:
            asyncio.run(self._feed())
        except BaseException as exc:  # reported by join()
            self.error = exc

    async def _feed(self) -> None:
        interval = self.seconds / max(1, len(self.bodies))
        gate = asyncio.Semaphore(self.in_flight)
        started = time.monotonic()

        async def one(i: int, body: bytes) -> None:
            await asyncio.sleep(max(0.0, started + i * interval - time.monotonic()))
            async with gate:
                await self._post_until_ok(session, body)
                if i % self.resend_every == self.resend_every - 1:
                    self.resent += 1
                    await self._post_until_ok(session, body)

        async with aiohttp.ClientSession(timeout=HTTP_TIMEOUT) as session:
            await asyncio.gather(*(one(i, body) for i, body in enumerate(self.bodies)))

    async def _post_until_ok(self, session: aiohttp.ClientSession, body: bytes) -> None:
        for attempt in range(1, 31):
            try:
                async with session.post(
                    self.url + "/v1/batch", data=body, headers=json_headers()
                ) as resp:
                    await resp.read()
                    status = resp.status
            except (aiohttp.ClientError, TimeoutError):
                status = 0
            self.statuses[status] += 1
            if status == 200:
                return
            if status not in RETRIED:
                raise AssertionError(f"the ingest service answered {status}: not retried")
            await asyncio.sleep(0 if attempt == 1 else min(0.5 * 2 ** (attempt - 2), 4.0))
        raise AssertionError("a request was still refused after 30 attempts")


class ConsumerThread:
    """An ``IdempotentConsumer`` of ``topic`` in its own thread and event loop, on a PostgreSQL
    store: each event's effect is a row of ``<table>_effects`` written in its claim's
    transaction (``join_transaction``), so an effect and its completed claim commit together."""

    def __init__(self, topic: str, bootstrap: str, group: str, dsn: str, table: str) -> None:
        self.effects_table = f"{table}_effects"
        self.store = PostgresStore(dsn, table=table)
        self.topic = topic
        self.bootstrap = bootstrap
        self.group = group
        self.stats = ConsumerStats()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.consumer: IdempotentConsumer | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    async def _effect(self, record: Any, claim: Any) -> str:
        event_id = record.key.decode()
        await claim.connection.execute(
            f"INSERT INTO {self.effects_table} (event_id, kafka_offset) VALUES (%s, %s)",
            (event_id, f"{record.partition}@{record.offset}"),
        )
        return f"effect-{event_id}"

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        async def main() -> None:
            # aiokafka binds its consumer to the loop it is created in: this thread's.
            self.consumer = IdempotentConsumer(
                self.topic,
                bootstrap_servers=self.bootstrap,
                group_id=self.group,
                store=self.store,
                handler=self._effect,
                join_transaction=True,
            )
            self.stats = self.consumer.stats
            self.loop = asyncio.get_running_loop()
            try:
                await self.consumer.run(timeout_ms=200)
            finally:
                await self.store.close()

        try:
            asyncio.run(main())
        except BaseException as exc:  # reported by wait_for / stop
            self.error = exc

    def check(self) -> None:
        if self.error is not None:
            raise AssertionError(f"the idempotent consumer failed: {self.error!r}") from self.error

    def wait_for(self, processed: int, timeout: float) -> float:
        """Block until the handler ran ``processed`` times; returns the seconds waited."""
        started = time.monotonic()
        while self.stats.processed < processed:
            self.check()
            if time.monotonic() - started > timeout:
                raise AssertionError(
                    f"the idempotent consumer processed {self.stats} after {timeout}s"
                )
            time.sleep(0.2)
        return time.monotonic() - started

    def stop(self, timeout: float = 60) -> None:
        """Ask the consumer to return after the record in hand; wait for its thread."""
        if self.loop is not None and self.consumer is not None and self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.consumer.stop)
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the idempotent consumer did not stop"
        self.check()
