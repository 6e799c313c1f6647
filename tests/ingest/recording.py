"""The ingest app served in-process over real HTTP with a recording sink instead of Kafka
(tests/ingest/test_app.py, test_metrics.py, test_fuzz_requests.py): the sink, ``serve`` and
``post``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from ingest.app import create_app
from ingest.events import Prepared
from ingest.settings import IngestSettings
from tests.ingest.support import WRITE_KEY, json_headers


class RecordingSink:
    """Keeps what would have been produced; can fail like Kafka does."""

    def __init__(self, error: BaseException | None = None, unready: str | None = None) -> None:
        self.requests: list[list[Prepared]] = []
        self.error = error
        self.unready = unready
        self.ready_timeouts: list[float] = []

    async def unready_reason(self, timeout: float) -> str | None:
        self.ready_timeouts.append(timeout)
        return self.unready

    async def send_all(self, records: Sequence[Prepared], timeout: float) -> None:
        if self.error is not None:
            raise self.error
        self.requests.append(list(records))

    @property
    def values(self) -> list[dict[str, Any]]:
        return [json.loads(r.value) for req in self.requests for r in req]


@asynccontextmanager
async def serve(sink: RecordingSink, write_keys: str = WRITE_KEY) -> AsyncIterator[TestClient]:
    settings = IngestSettings(write_keys=write_keys, ack_timeout=2.0)
    async with TestClient(TestServer(create_app(settings, sink=sink))) as client:
        yield client


async def post(client: TestClient, path: str, doc: Any, **headers: str) -> tuple[int, Any]:
    resp = await client.post(path, data=json.dumps(doc).encode(), headers=json_headers(**headers))
    return resp.status, await resp.json()
