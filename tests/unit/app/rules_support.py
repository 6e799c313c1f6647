"""Shared by the table-driven tests of ``app/rules.py`` (tests/unit/test_rules_*.py): the size
limits and the helpers that inspect a value and build events."""

from __future__ import annotations

import json

from app import rules

MAX_EVENT = 1024

MAX_ID = 8


def check(value: bytes | None, *, max_event: int = MAX_EVENT, max_id: int = MAX_ID):
    return rules.inspect(value, max_event_bytes=max_event, max_id_bytes=max_id)


def doc(message_id: object) -> bytes:
    return json.dumps({"messageId": message_id, "type": "track"}).encode()
