"""Faust's transaction manager with its own commits and sends refused: in this worker every
record is sent inside its partition task's transaction and the tasks commit on their own loop
(``manager.py``), so Faust's periodic commit and any send outside a task must not take effect."""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import Any

from aiokafka.structs import RecordMetadata
from faust.transport.consumer import TransactionManager
from faust.types import TP


class TaskSendsOnly(TransactionManager):  # type: ignore[misc]
    """The calls of Faust's transaction manager that this worker takes over or refuses."""

    async def commit(self, offsets: Mapping[TP, int], start_new_transaction: bool = True) -> bool:
        """Faust's periodic commit: a no-op, our own loop commits.

        Returning False keeps Faust from marking table offsets as persisted on its own.
        """
        return False

    async def send(self, *args: Any, **kwargs: Any) -> Awaitable[RecordMetadata]:
        raise RuntimeError(
            "sends outside a task transaction are not allowed in this worker; "
            "use TaskBatch.send inside tm.processing_batch(messages)"
        )

    async def send_and_wait(self, *args: Any, **kwargs: Any) -> RecordMetadata:
        raise RuntimeError("sends outside a task transaction are not allowed in this worker")

    async def flush(self) -> None:
        """Nothing to flush outside of tasks: task sends are awaited at commit."""
