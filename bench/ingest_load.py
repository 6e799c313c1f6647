"""The ingest benchmark's client: Segment-style requests, a saturating phase and a paced one.

A *case* is one request shape: ``single`` (``POST /v1/track``, one event), ``batch100``
(``POST /v1/batch``, 100 events) and ``batch100-gzip`` (the same, gzipped as analytics-node and
the mobile SDKs send it). Bodies are built before the clock starts, each event with its own
``messageId`` (a UUID, as SDKs make them), so the client's cost is sending and reading only.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
import uuid
from dataclasses import dataclass, field

import aiohttp

from bench.measure import percentile

CASES = {"single": (1, False), "batch100": (100, False), "batch100-gzip": (100, True)}
WRITE_KEY = "bench-key"
#: Distinct bodies per case; the saturating phase cycles through them.
POOL = 2_000


@dataclass
class Body:
    data: bytes
    ids: list[str]


@dataclass
class Phase:
    """What one phase measured: requests answered 200, events in them, latencies (s)."""

    seconds: float = 0.0
    requests: int = 0
    events: int = 0
    failed: int = 0
    ack_latencies: list[float] = field(default_factory=list)

    def rate(self, n: int) -> float:
        return n / self.seconds if self.seconds else 0.0

    def ack_ms(self, q: float) -> float | None:
        value = percentile(self.ack_latencies, q)
        return None if value is None else value * 1000


def event(message_id: str) -> dict[str, object]:
    """A track call as analytics.js sends it (about 600 bytes of JSON)."""
    return {
        "type": "track",
        "event": "Order Completed",
        "userId": "user-" + message_id[:8],
        "anonymousId": "anon-" + message_id[9:13],
        "messageId": message_id,
        "timestamp": "2026-09-21T12:34:56.789Z",
        "properties": {"orderId": message_id[:13], "total": 27.5, "currency": "EUR"},
        "context": {
            "library": {"name": "analytics.js", "version": "next-1.70.0"},
            "page": {"path": "/checkout", "url": "https://shop.example.com/checkout"},
            "userAgent": "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/130.0",
        },
    }


def bodies(case: str, count: int = POOL) -> list[Body]:
    size, gzipped = CASES[case]
    out = []
    for _ in range(count):
        ids = [str(uuid.uuid4()) for _ in range(size)]
        doc: object = event(ids[0]) if size == 1 else {"batch": [event(i) for i in ids]}
        data = json.dumps(doc).encode()
        out.append(Body(gzip.compress(data) if gzipped else data, ids))
    return out


def headers(case: str) -> dict[str, str]:
    out = {"Content-Type": "application/json"}
    if CASES[case][1]:
        out["Content-Encoding"] = "gzip"
    return out


def path(case: str) -> str:
    return "/v1/track" if CASES[case][0] == 1 else "/v1/batch"


async def post(
    session: aiohttp.ClientSession, url: str, body: Body, hdrs: dict[str, str], phase: Phase
) -> bool:
    started = time.monotonic()
    async with session.post(url, data=body.data, headers=hdrs) as resp:
        await resp.read()
        ok = resp.status == 200
    if ok:
        phase.ack_latencies.append(time.monotonic() - started)
        phase.requests += 1
        phase.events += len(body.ids)
    else:
        phase.failed += 1
    return ok


def session(concurrency: int) -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=concurrency),
        auth=aiohttp.BasicAuth(WRITE_KEY, ""),
    )


async def saturate(base: str, case: str, seconds: float, concurrency: int) -> Phase:
    """``concurrency`` clients, each posting its next body once the last one was answered,
    for ``seconds``."""
    pool, hdrs, url = bodies(case), headers(case), base + path(case)
    phase = Phase()
    next_body = iter(range(1 << 62))
    async with session(concurrency) as s:
        deadline = time.monotonic() + seconds

        async def client() -> None:
            while time.monotonic() < deadline:
                await post(s, url, pool[next(next_body) % len(pool)], hdrs, phase)

        started = time.monotonic()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        phase.seconds = time.monotonic() - started
    return phase


async def paced(base: str, rate: float, seconds: float, sent_at: dict[bytes, float]) -> Phase:
    """Single events at ``rate`` per second for ``seconds``; each id's send time (wall clock,
    as the clean-topic watcher reads it) goes into ``sent_at``."""
    pool, hdrs, url = bodies("single", int(rate * seconds)), headers("single"), base + "/v1/track"
    phase = Phase()
    async with session(64) as s:
        started = time.monotonic()
        tasks = []
        for i, body in enumerate(pool):
            await asyncio.sleep(max(0.0, started + i / rate - time.monotonic()))
            sent_at[body.ids[0].encode()] = time.time()
            tasks.append(asyncio.ensure_future(post(s, url, body, hdrs, phase)))
        await asyncio.gather(*tasks)
        phase.seconds = time.monotonic() - started
    return phase
