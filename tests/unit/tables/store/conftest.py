"""Fixtures of the ``TransactionalStore`` tests: a harness on a temporary directory and a store
built by it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tables.store import TransactionalStore
from tests.unit.tables.store.support import Harness


@pytest.fixture
async def harness(tmp_path: Path) -> AsyncIterator[Harness]:
    h = Harness(tmp_path)
    yield h
    for store in h.stores:
        await store.on_stop()


@pytest.fixture
def store(harness: Harness) -> TransactionalStore:
    return harness.new_store()
