"""The ``world`` fixture of the ``tables.seen_ids`` tests: one real store, torn down after."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.unit.tables.seen_ids.support import World


@pytest.fixture
async def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    w = World(tmp_path, monkeypatch)
    yield w
    for store in w.stores:
        await store.on_stop()
