"""``/ready``'s answer (app/web/views.py) before and after the worker's parts have started."""

from __future__ import annotations

import asyncio
import types
from typing import Any

from faust.exceptions import ConsumerNotStarted

from app.web.views import is_ready


class Consumer:
    def __init__(self, assigned: set[int] | None) -> None:
        self.assigned = assigned

    def assignment(self) -> set[int]:
        if self.assigned is None:
            raise ConsumerNotStarted("Consumer thread not yet started")
        return self.assigned


def app_with(
    assigned: set[int] | None, *, recovered: bool = True, rebalancing: bool = False
) -> Any:
    completed = asyncio.Event()
    if recovered:
        completed.set()
    recovery = types.SimpleNamespace(completed=completed, in_recovery=False)
    return types.SimpleNamespace(
        consumer=Consumer(assigned),
        tables=types.SimpleNamespace(recovery=recovery),
        rebalancing=rebalancing,
    )


def test_a_consumer_not_started_yet_is_not_ready_rather_than_an_error() -> None:
    assert is_ready(app_with(None)) is False


def test_ready_once_assigned_recovered_and_not_rebalancing() -> None:
    assert is_ready(app_with({0, 1})) is True
    assert is_ready(app_with(set())) is False
    assert is_ready(app_with({0}, recovered=False)) is False
    assert is_ready(app_with({0}, rebalancing=True)) is False
