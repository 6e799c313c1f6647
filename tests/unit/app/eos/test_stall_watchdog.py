"""``StallWatchdog.check`` when the worker stops under it."""

from __future__ import annotations

import asyncio

from aiokafka.errors import ConsumerStoppedError
from aiokafka.structs import TopicPartition

from app.eos.guards import StallWatchdog
from app.eos.task import Task


class StoppedReader:
    """The broker reader after the manager's on_stop closed it."""

    def __init__(self) -> None:
        self.asked: list[TopicPartition] = []

    async def first_record_from(self, tp: TopicPartition, position: int) -> int | None:
        self.asked.append(tp)
        raise ConsumerStoppedError()


async def _no_seek(tp: TopicPartition, position: int) -> None:
    raise AssertionError("nothing is sought when the reader is closed")


def test_a_check_in_flight_when_the_reader_closes_ends_quietly() -> None:
    """A graceful stop closed the broker reader while the watchdog was probing a quiet
    partition: aiokafka raised ConsumerStoppedError, the manager's task crashed and the worker
    exited 1 on SIGTERM (seen in the Spark tier's pipeline test). The round now ends without
    probing the task's other partitions."""
    reader = StoppedReader()
    watchdog = StallWatchdog(0.0, reader, lambda: False, _no_seek, lambda: None)  # type: ignore[arg-type]
    task = Task(partition=0, transactional_id="t-0")
    a, b = TopicPartition("in", 0), TopicPartition("in-repartition", 0)
    task.positions[a] = 5
    task.positions[b] = 7
    asyncio.run(watchdog.check([task], quiet_since=0.0))
    assert reader.asked == [a]
