"""Shared by the stock Faust tests (tests/integration/stock_faust/test_stock_faust_*.py): the
type of the ``stock_worker`` factory, the ids of a run, and the keys of a topic's records."""

from __future__ import annotations

from collections.abc import Callable

from scripts.topic_reader import read_topic
from tests.integration.stock_faust.harness import (
    StockWorker,
    run,
)

MakeWorker = Callable[..., StockWorker]


def ids(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i:06d}".encode() for i in range(n)]


def keys_of(bootstrap: str, topic: str, isolation_level: str = "read_committed") -> list[bytes]:
    records = run(read_topic(bootstrap, topic, isolation_level=isolation_level))
    return [r.key for r in records if r.key is not None]
