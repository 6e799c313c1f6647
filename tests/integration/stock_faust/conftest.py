"""Fixtures for the stock-Faust evidence tests: fresh names; stock workers killed at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from scripts.topic_admin import create_topics
from tests.integration.stock_faust.harness import StockNames, StockWorker, run
from tests.support import Broker


@pytest.fixture
def stock_names(broker: Broker) -> StockNames:
    """Fresh names; the input, output and changelog topics exist.

    Faust would create the changelog itself, but right after creating it its consumer's metadata
    may still show the topic with 0 partitions, and the agent then crash-loops on
    ``PartitionsMismatch`` (seen once in these tests): create it beforehand, as Faust would."""
    names = StockNames()
    run(create_topics(broker.bootstrap, [names.input_topic, names.output_topic], partitions=2))
    run(
        create_topics(
            broker.bootstrap,
            [names.changelog_topic],
            partitions=2,
            config={"cleanup.policy": "compact"},
        )
    )
    return names


@pytest.fixture
def stock_worker(
    broker: Broker, stock_names: StockNames, tmp_path: Path
) -> Iterator[Callable[..., StockWorker]]:
    """``stock_worker(data="a", **env)``: a (not yet started) stock worker on data dir ``data``."""
    made: list[StockWorker] = []

    def make(data: str = "a", **env: str) -> StockWorker:
        worker = StockWorker(
            broker.bootstrap,
            stock_names,
            data_dir=tmp_path / f"data-{data}",
            log_path=tmp_path / f"worker-{len(made)}-{data}.log",
            extra_env=env,
        )
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.kill()
