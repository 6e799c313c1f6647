"""What the ingest service's rules share: the rejection they raise, the limits they check a
request against, and how they name a JSON value's type in a message."""

from __future__ import annotations

from dataclasses import dataclass


class Rejected(Exception):
    """A request that is answered with ``status`` and ``{"code": code, "error": message}``."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message


@dataclass(frozen=True, slots=True)
class Limits:
    """The limits a request is checked against (from the settings)."""

    max_event_bytes: int
    max_message_id_bytes: int
    max_batch_bytes: int
    max_batch_events: int


def json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"
