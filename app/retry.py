"""Start-up questions to the cluster that wait out a broker failing over.

A worker may start while a broker is down: the admin client then meets it as
``NodeNotReadyError``, a coordinator that moves, or a leader not elected yet, all retriable in
Kafka's terms. The worker's own consumer and producers wait for the cluster in that case; its
start-up checks must too, or a worker started during a failover exits (cluster row C3: a
worker joining as the group coordinator's broker is killed).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from aiokafka.errors import KafkaError

log = logging.getLogger(__name__)

T = TypeVar("T")

#: How long the start-up waits for a cluster that answers with retriable errors: longer than a
#: broker's restart and re-election on a loaded machine.
PATIENCE = 90.0


async def retrying(what: str, ask: Callable[[], Awaitable[T]], patience: float = PATIENCE) -> T:
    """``await ask()``, again (a fresh call, so a fresh client) after each retriable Kafka
    error, for up to ``patience`` seconds; any other error, or the last one, is raised."""
    deadline = time.monotonic() + patience
    delay = 0.5
    while True:
        try:
            return await ask()
        except KafkaError as exc:
            if not exc.retriable or time.monotonic() > deadline:
                raise
            log.warning("%s: the cluster is not ready (%r); retrying in %.1fs", what, exc, delay)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 5.0)
