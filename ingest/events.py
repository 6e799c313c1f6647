"""The pure rules of the ingest service for a request's events: read them, check them, give each
an id (the request around them, its body and write key, is ``ingest/request.py``'s).

No I/O lives here; ``ingest/app.py`` reads the request and sends the records, and asks these
functions what to do. Every rule raises :class:`Rejected` with the HTTP status, a stable
machine-readable ``code`` and a sentence that names the problem (and the event's index). A
request is checked whole before anything is sent, so a rejected request sends nothing.

Segment semantics kept here (HTTP Tracking API):

- ``/v1/batch`` takes ``{"batch": [event, ...], "context"?, "integrations"?, "sentAt"?}``; each
  event names its ``type``. The batch's ``context`` and ``integrations`` apply to every event
  (an event's own keys win), and its ``sentAt`` is copied to events that have none.
- ``/v1/track``, ``/identify``, ``/page``, ``/screen``, ``/group``, ``/alias`` take one event
  whose ``type`` is set from the path.
- analytics.js (the browser library) posts each call to ``/v1/<first letter of its type>``
  (``/v1/t``, ``/v1/i``, ``/v1/p``, ``/v1/s``, ``/v1/g``, ``/v1/a``) and batches to ``/v1/b``
  (:data:`SHORT_PATHS`), with ``Content-Type: text/plain`` and the write key in the body, and
  so does a browser's ``navigator.sendBeacon`` with a string: a ``text/plain`` body is read as
  JSON, exactly as an ``application/json`` one (same limits, same auth; browsers send text/plain
  because it needs no CORS preflight).
- The write key comes from HTTP Basic auth (user name = write key, password empty) or from the
  body's ``writeKey``; it is removed from the events (credentials never reach Kafka).
- Required fields as Segment documents them: ``userId`` or ``anonymousId`` (alias: ``userId``
  and ``previousId``), ``event`` for track, ``groupId`` for group.
- ``receivedAt`` is set (ISO 8601 UTC, ms) and everything else is kept as sent.

Message ids, and why a retry never duplicates
---------------------------------------------
Events are keyed by ``messageId`` and the dedup worker keeps the first copy of each id, so a
client that retries a request (same body) after a failure or timeout cannot create duplicates:
whatever part of the first attempt reached Kafka is dropped downstream as a repeat. Segment's
SDKs always send a ``messageId`` (a UUID made once per event, kept across retries). For clients
that do not, the id assigned here is *derived from the event*, not random: a UUIDv4-formatted
string made from SHA-256 over the write key and the canonical JSON of the event (sorted keys,
without ``receivedAt``, ``sentAt`` and ``writeKey``, which change between attempts or are not
part of the event). A retried identical body therefore maps to the same ids.

Trade-off: two events sent without ``messageId`` that are identical apart from those fields --
typically because they also carry no ``timestamp`` -- get the same id and collapse into one
(within the dedup window). Clients that need such events kept apart must send a ``messageId``
or a ``timestamp``, as every Segment SDK does.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson

from ingest.rejected import Limits, Rejected, json_type

#: The Segment call types; the single-event endpoints are /v1/<type>.
EVENT_TYPES = ("track", "identify", "page", "screen", "group", "alias")

#: analytics.js's paths: /v1/<short> for /v1/<kind> ("batch" or a call type).
SHORT_PATHS = {kind[0]: kind for kind in ("batch", *EVENT_TYPES)}

#: Fields that differ between attempts of the same request, or are credentials: not hashed.
UNHASHED_FIELDS = frozenset({"receivedAt", "sentAt", "writeKey", "messageId"})

_ID_NAMESPACE = b"dedupe-ingest/messageId/v1\x00"


@dataclass(frozen=True, slots=True)
class Prepared:
    """One event ready to produce: key = messageId UTF-8 bytes, value = compact JSON, and the
    source name of its write key (the ``dedupe.source`` header; None: no header)."""

    message_id: str
    key: bytes
    value: bytes
    source: bytes | None = None


def events_of(kind: str, doc: Mapping[str, Any], limits: Limits) -> list[dict[str, Any]]:
    """The events of a request to ``/v1/<kind>``: the batch's items or the body itself, with
    batch-level context, integrations and sentAt applied and ``writeKey`` removed."""
    if kind != "batch":
        if kind not in EVENT_TYPES:
            raise Rejected(404, "not_found", f"no endpoint /v1/{kind}")
        event = {k: v for k, v in doc.items() if k != "writeKey"}
        event["type"] = kind
        return [event]
    if "batch" not in doc:
        raise Rejected(400, "invalid_batch", "body has no 'batch' array")
    batch = doc["batch"]
    if not isinstance(batch, list):
        raise Rejected(400, "invalid_batch", f"'batch' must be an array, not {json_type(batch)}")
    if not batch:
        raise Rejected(400, "invalid_batch", "'batch' is empty")
    if len(batch) > limits.max_batch_events:
        raise Rejected(
            400,
            "too_many_events",
            f"'batch' has {len(batch)} events; the limit is {limits.max_batch_events} per request",
        )
    shared = {k: doc[k] for k in ("context", "integrations") if isinstance(doc.get(k), dict)}
    sent_at = doc.get("sentAt")
    out: list[dict[str, Any]] = []
    for index, item in enumerate(batch):
        if not isinstance(item, dict):
            raise Rejected(
                400,
                "invalid_event",
                f"batch[{index}] must be a JSON object, not {json_type(item)}",
            )
        event = {k: v for k, v in item.items() if k != "writeKey"}
        for name, value in shared.items():
            own = event.get(name)
            if own is None:
                event[name] = dict(value)
            elif isinstance(own, dict):
                event[name] = {**value, **own}
        if sent_at is not None and "sentAt" not in event:
            event["sentAt"] = sent_at
        out.append(event)
    return out


def _has_id(value: object) -> bool:
    if isinstance(value, str):
        return bool(value)
    return isinstance(value, int | float) and not isinstance(value, bool)


def _required(event: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(code, what is missing) for each of Segment's required fields the event lacks."""
    kind = event["type"]
    missing: list[tuple[str, str]] = []
    if kind == "alias":
        if not _has_id(event.get("userId")):
            missing.append(("no_user_id", "an alias event needs 'userId'"))
        if not _has_id(event.get("previousId")):
            missing.append(("no_previous_id", "an alias event needs 'previousId'"))
        return missing
    if not (_has_id(event.get("userId")) or _has_id(event.get("anonymousId"))):
        missing.append(("no_user_anon_id", f"a {kind} event needs 'userId' or 'anonymousId'"))
    if kind == "track" and not (isinstance(event.get("event"), str) and event["event"]):
        missing.append(("no_event_name", "a track event needs a non-empty 'event' name"))
    if kind == "group" and not _has_id(event.get("groupId")):
        missing.append(("no_group_id", "a group event needs 'groupId'"))
    return missing


def validate(event: Mapping[str, Any], where: str, limits: Limits) -> None:
    """Segment's rules for one event; ``where`` names it in the message (``batch[3]``)."""
    kind = event.get("type")
    if kind not in EVENT_TYPES:
        allowed = ", ".join(EVENT_TYPES)
        raise Rejected(
            400, "invalid_type", f"{where}: 'type' must be one of {allowed} (got {kind!r})"
        )
    missing = _required(event)
    if missing:
        code, what = missing[0]
        raise Rejected(400, code, f"{where}: {what}")
    message_id = event.get("messageId")
    if message_id is None:
        return
    if not isinstance(message_id, str) or not message_id:
        raise Rejected(
            400, "invalid_message_id", f"{where}: 'messageId' must be a non-empty string"
        )
    size = len(message_id.encode("utf-8", "surrogatepass"))
    if size > limits.max_message_id_bytes:
        raise Rejected(
            400,
            "invalid_message_id",
            f"{where}: 'messageId' is {size} bytes; the limit is "
            f"{limits.max_message_id_bytes} UTF-8 bytes",
        )


def derive_message_id(write_key: str, event: Mapping[str, Any]) -> str:
    """A UUIDv4-formatted id that depends only on the write key and the event's content
    (not on ``receivedAt``/``sentAt``), so a retried identical body gets the same ids."""
    content = {k: v for k, v in event.items() if k not in UNHASHED_FIELDS}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    digest = hashlib.sha256(
        _ID_NAMESPACE + write_key.encode("utf-8", "surrogatepass") + b"\x00" + canonical.encode()
    ).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))


def received_at_text(now: datetime) -> str:
    """``receivedAt`` as Segment writes it: ISO 8601 UTC with milliseconds and ``Z``."""
    return now.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def kind_of_path(name: str) -> str:
    """The endpoint ``/v1/<name>`` stands for: "batch" or a call type (short paths mapped)."""
    return SHORT_PATHS.get(name, name)


def serialize(event: Mapping[str, Any]) -> bytes:
    """Compact JSON of ``event``, UTF-8. orjson writes it (a large share of a request's CPU
    with the standard library: ``make bench-ingest``); what orjson cannot write (integers past
    64 bits, lone surrogates) the standard library does, or refuses with its own error. The
    two differ only in how a float's exponent is written (``1e+16`` and ``1e16``): the same
    number to every JSON reader, and the worker compares parsed content, not bytes."""
    try:
        return orjson.dumps(event)
    except TypeError:
        return json.dumps(event, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode(
            "utf-8"
        )


def prepare(
    kind: str,
    doc: Mapping[str, Any],
    write_key: str | None,
    received_at: str,
    limits: Limits,
    source: str | None = None,
) -> list[Prepared]:
    """Every event of the request, validated, with its messageId and receivedAt, serialized.

    Raises :class:`Rejected` for the first problem found; nothing is returned (and so nothing
    is sent) unless every event passes.
    """
    out: list[Prepared] = []
    events = events_of(kind, doc, limits)
    for index, event in enumerate(events):
        where = f"batch[{index}]" if kind == "batch" else "the event"
        validate(event, where, limits)
        message_id = event.get("messageId")
        if message_id is None:
            message_id = derive_message_id(write_key or "", event)
        event["messageId"] = message_id
        event["receivedAt"] = received_at
        try:
            value = serialize(event)
        except UnicodeEncodeError:
            raise Rejected(
                400,
                "invalid_unicode",
                f"{where}: contains a lone UTF-16 surrogate (\\ud800-\\udfff escape)",
            ) from None
        if len(value) > limits.max_event_bytes:
            raise Rejected(
                400,
                "event_too_large",
                f"{where} is {len(value)} bytes as JSON; the limit is {limits.max_event_bytes} "
                "bytes per event (Segment's 32 KB)",
            )
        source_bytes = None if source is None else source.encode("utf-8")
        out.append(Prepared(message_id, message_id.encode("utf-8"), value, source_bytes))
    return out
