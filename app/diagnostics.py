"""``kill -USR1 <worker pid>``: log what every coroutine and thread of the worker waits on.

A worker that stops making progress without an error is the hardest thing to diagnose after
the fact; this puts the answer in its log while it is stuck. It logs, at WARNING, the stack of
every asyncio task of the main loop and of Faust's consumer-thread loop, and of every thread.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
import threading
import traceback
from typing import Any

log = logging.getLogger(__name__)


def _await_chain(coro: Any) -> list[str]:
    """``file:line function`` of each coroutine or async generator ``coro`` awaits, outermost
    first (a task's own stack only shows the outermost frame)."""
    lines: list[str] = []
    for _ in range(50):
        frame = (
            getattr(coro, "cr_frame", None)
            or getattr(coro, "ag_frame", None)
            or getattr(coro, "gi_frame", None)
        )
        if frame is not None:
            code = frame.f_code
            lines.append(f"  {code.co_filename}:{frame.f_lineno} {code.co_name}")
        awaited = next(
            (
                getattr(coro, name)
                for name in ("cr_await", "ag_await", "gi_yieldfrom")
                if getattr(coro, name, None) is not None
            ),
            None,
        )
        if awaited is None:
            break
        coro = awaited
    lines.append(f"  -> {coro!r}"[:240])
    return lines


def _task_stacks(loop: asyncio.AbstractEventLoop, title: str) -> str:
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed while we copied it (other thread's loop)
        return f"{title}: tasks changed while listing them\n"
    out = [f"{title}: {len(tasks)} tasks"]
    for task in sorted(tasks, key=lambda t: t.get_name()):
        out.append(f"--- {task.get_name()}")
        out.extend(_await_chain(task.get_coro()))
    return "\n".join(out) + "\n"


def dump(app: Any) -> str:
    """The stacks as one text (also what the signal handler logs)."""
    parts = [_task_stacks(asyncio.get_running_loop(), "main loop")]
    thread = getattr(getattr(app, "consumer", None), "_thread", None)
    thread_loop = getattr(thread, "thread_loop", None)
    if isinstance(thread_loop, asyncio.AbstractEventLoop):
        parts.append(_task_stacks(thread_loop, "consumer thread loop"))
    names = {t.ident: t.name for t in threading.enumerate()}
    for ident, frame in sys._current_frames().items():
        parts.append(
            f"thread {names.get(ident, ident)}:\n" + "".join(traceback.format_stack(frame))
        )
    return "\n".join(parts)


def install(app: Any) -> None:
    """Log :func:`dump` on SIGUSR1 (call from the running loop)."""

    def handler() -> None:
        log.warning("SIGUSR1: what the worker waits on\n%s", dump(app))

    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, handler)
