"""Start-up questions wait out a broker failing over (recovery/retry.py's ``retrying``):
retriable Kafka errors are asked again with a fresh call; others are raised at once, and the
patience's end raises GaveUp naming the last error."""

from __future__ import annotations

import pytest
from aiokafka.errors import NodeNotReadyError, UnknownError

from recovery.retry import GaveUp, retrying


class Ask:
    def __init__(self, *errors: Exception) -> None:
        self.errors = list(errors)
        self.calls = 0

    async def __call__(self) -> str:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return "answer"


async def test_a_broker_not_ready_is_waited_for() -> None:
    ask = Ask(NodeNotReadyError("node 3"), NodeNotReadyError("node 3"))
    assert await retrying("asking", ask) == "answer"
    assert ask.calls == 3


async def test_waiting_ends_after_the_patience() -> None:
    ask = Ask(*(NodeNotReadyError("node 3") for _ in range(5)))
    with pytest.raises(GaveUp, match="asking: failed 1 times") as raised:
        await retrying("asking", ask, patience=0.0)
    assert isinstance(raised.value.__cause__, NodeNotReadyError)
    assert ask.calls == 1


async def test_an_error_that_will_not_pass_is_raised_at_once() -> None:
    ask = Ask(UnknownError())
    with pytest.raises(UnknownError):
        await retrying("asking", ask)
    assert ask.calls == 1


async def test_other_exceptions_are_not_retried() -> None:
    ask = Ask(ValueError("a bug"))
    with pytest.raises(ValueError):
        await retrying("asking", ask)
    assert ask.calls == 1
