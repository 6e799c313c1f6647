"""``app.diagnostics``: the SIGUSR1 dump names what each coroutine waits on."""

from __future__ import annotations

import asyncio
import logging
import os
import signal

import pytest

from app import diagnostics


async def inner_commit_wait(event: asyncio.Event) -> None:
    await event.wait()


async def waits_for_a_commit_that_never_comes(event: asyncio.Event) -> None:
    await inner_commit_wait(event)


async def test_the_dump_shows_a_stuck_coroutine_and_the_threads() -> None:
    stuck = asyncio.create_task(waits_for_a_commit_that_never_comes(asyncio.Event()))
    await asyncio.sleep(0)
    text = diagnostics.dump(app=None)
    stuck.cancel()
    assert "waits_for_a_commit_that_never_comes" in text
    assert "inner_commit_wait" in text  # the whole await chain, not only the task's frame
    assert "main loop:" in text and "thread MainThread" in text


async def test_sigusr1_logs_the_dump(caplog: pytest.LogCaptureFixture) -> None:
    diagnostics.install(app=None)
    stuck = asyncio.create_task(waits_for_a_commit_that_never_comes(asyncio.Event()))
    await asyncio.sleep(0)
    with caplog.at_level(logging.WARNING, logger="app.diagnostics"):
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.1)
    stuck.cancel()
    asyncio.get_running_loop().remove_signal_handler(signal.SIGUSR1)
    assert "waits_for_a_commit_that_never_comes" in caplog.text
