"""Shared by the table-driven tests of ``ingest/request.py`` and ``ingest/events.py``
(tests/ingest/test_request.py, tests/ingest/test_events.py): the limits, and the check of a
rejection's status and code."""

from __future__ import annotations

import pytest

from ingest.rejected import Limits, Rejected

LIMITS = Limits(
    max_event_bytes=32 * 1024,
    max_message_id_bytes=256,
    max_batch_bytes=500 * 1024,
    max_batch_events=2500,
)


def rejected(exc: pytest.ExceptionInfo[Rejected], status: int, code: str) -> str:
    assert (exc.value.status, exc.value.code) == (status, code), exc.value.message
    return exc.value.message
