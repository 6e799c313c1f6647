"""Bad HTTP requests and what each must be answered: used in-process (``test_app.py``) and
against the real service and broker (``test_http_kafka.py``), where the input topic must stay
empty."""

from __future__ import annotations

import gzip
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.ingest.support import WRITE_KEY, basic


def sdk_event(n: int, **extra: Any) -> dict[str, Any]:
    """An event as Segment's Python SDK sends it inside a batch."""
    return {
        "type": "track",
        "event": "Order Completed",
        "userId": f"user-{n}",
        "properties": {"n": n, "revenue": 9.99},
        "context": {"library": {"name": "analytics-python", "version": "2.4.0"}},
        "timestamp": "2030-01-01T00:00:00+00:00",
        "messageId": str(uuid.uuid4()),
        "integrations": {},
        **extra,
    }


@dataclass(frozen=True)
class BadRequest:
    name: str
    status: int
    code: str
    fragment: str  # must appear in the JSON error
    body: bytes = b""
    path: str = "/v1/batch"
    method: str = "POST"
    headers: dict[str, str] = field(
        default_factory=lambda: {
            "Content-Type": "application/json",
            "Authorization": basic(WRITE_KEY),
        }
    )


def _batch(*events: dict[str, Any], **top: Any) -> bytes:
    return json.dumps({"batch": list(events), **top}).encode()


_JSON = {"Content-Type": "application/json"}
#: What a browser's navigator.sendBeacon (and analytics.js's fetch) sends: JSON as text/plain,
#: no Authorization header (the write key is in the body).
_BEACON = {"Content-Type": "text/plain;charset=UTF-8"}
_AUTH = {"Authorization": basic(WRITE_KEY)}
_GOOD = _batch(sdk_event(1))

BAD_REQUESTS = [
    BadRequest("no key", 401, "unauthorized", "no write key", _GOOD, headers=_JSON),
    BadRequest(
        "unknown key",
        401,
        "unauthorized",
        "unknown write key",
        _GOOD,
        headers={**_JSON, "Authorization": basic("stolen")},
    ),
    BadRequest(
        "unknown body writeKey",
        401,
        "unauthorized",
        "unknown write key",
        _batch(sdk_event(1), writeKey="stolen"),
        headers=_JSON,
    ),
    BadRequest(
        "malformed basic",
        401,
        "unauthorized",
        "malformed",
        _GOOD,
        headers={**_JSON, "Authorization": "Basic %%%"},
    ),
    BadRequest(
        "text/html",
        415,
        "unsupported_media_type",
        "text/html",
        _GOOD,
        headers={**_AUTH, "Content-Type": "text/html"},
    ),
    BadRequest(
        "form",
        415,
        "unsupported_media_type",
        "application/x-www-form-urlencoded",
        _GOOD,
        headers={**_AUTH, "Content-Type": "application/x-www-form-urlencoded"},
    ),
    BadRequest(
        "beacon latin-1",
        415,
        "unsupported_media_type",
        "charset",
        _batch(sdk_event(1), writeKey=WRITE_KEY),
        headers={"Content-Type": "text/plain; charset=latin-1"},
    ),
    BadRequest(
        "beacon without a key",
        401,
        "unauthorized",
        "no write key",
        _GOOD,
        headers=_BEACON,
    ),
    BadRequest(
        "beacon with an unknown key",
        401,
        "unauthorized",
        "unknown write key",
        json.dumps({"writeKey": "stolen", "userId": "u", "event": "e"}).encode(),
        path="/v1/t",
        headers=_BEACON,
    ),
    BadRequest(
        "beacon not json",
        400,
        "invalid_json",
        "not valid JSON",
        b"writeKey=test-write-key&event=e",
        path="/v1/t",
        headers=_BEACON,
    ),
    BadRequest(
        "beacon event over 32 KB",
        400,
        "event_too_large",
        "the event is",
        json.dumps(
            {
                "writeKey": WRITE_KEY,
                "userId": "u",
                "event": "e",
                "properties": {"pad": "x" * 33_000},
            }
        ).encode(),
        path="/v1/t",
        headers=_BEACON,
    ),
    BadRequest(
        "beacon batch over 500 KB",
        413,
        "request_too_large",
        "512000",
        _batch(
            *(sdk_event(i, properties={"pad": "x" * 20_000}) for i in range(30)),
            writeKey=WRITE_KEY,
        ),
        path="/v1/b",
        headers=_BEACON,
    ),
    BadRequest(
        "no content type",
        415,
        "unsupported_media_type",
        "application/json",
        _GOOD,
        headers=_AUTH,
    ),
    BadRequest(
        "latin-1",
        415,
        "unsupported_media_type",
        "charset",
        _GOOD,
        headers={**_AUTH, "Content-Type": "application/json; charset=latin-1"},
    ),
    BadRequest(
        "brotli",
        415,
        "unsupported_encoding",
        "'br'",
        _GOOD,
        headers={**_AUTH, **_JSON, "Content-Encoding": "br"},
    ),
    BadRequest(
        "bad gzip",
        400,
        "invalid_gzip",
        "gzip",
        b"definitely not gzip",
        headers={**_AUTH, **_JSON, "Content-Encoding": "gzip"},
    ),
    BadRequest("malformed json", 400, "invalid_json", "not valid JSON", b'{"batch": [{"type": '),
    BadRequest("not utf-8", 400, "invalid_json", "not UTF-8", b'{"batch": ["\xff"]}'),
    BadRequest("NaN", 400, "invalid_json", "NaN", b'{"batch": [{"x": NaN}]}'),
    BadRequest("array body", 400, "invalid_body", "JSON object", b"[]"),
    BadRequest("no batch", 400, "invalid_batch", "'batch'", b'{"events": []}'),
    BadRequest("empty batch", 400, "invalid_batch", "empty", _batch()),
    BadRequest(
        "unknown type",
        400,
        "invalid_type",
        "batch[1]",
        _batch(sdk_event(1), sdk_event(2, type="click")),
    ),
    BadRequest(
        "no user",
        400,
        "no_user_anon_id",
        "batch[2]",
        _batch(sdk_event(1), sdk_event(2), {"type": "identify", "traits": {}}),
    ),
    BadRequest(
        "messageId not string",
        400,
        "invalid_message_id",
        "batch[0]",
        _batch(sdk_event(1, messageId=12)),
    ),
    BadRequest(
        "event over 32 KB",
        400,
        "event_too_large",
        "batch[3] is",
        _batch(*(sdk_event(i) for i in range(3)), sdk_event(3, properties={"pad": "x" * 33_000})),
    ),
    BadRequest(
        "single event over 32 KB",
        400,
        "event_too_large",
        "the event is",
        json.dumps({"userId": "u", "event": "e", "properties": {"pad": "x" * 33_000}}).encode(),
        path="/v1/track",
    ),
    BadRequest(
        "track without event name",
        400,
        "no_event_name",
        "'event'",
        json.dumps({"userId": "u"}).encode(),
        path="/v1/track",
    ),
    BadRequest(
        "too many events",
        400,
        "too_many_events",
        "2501",
        _batch(*({"type": "identify", "userId": f"u{i}"} for i in range(2501))),
    ),
    BadRequest(
        "batch over 500 KB",
        413,
        "request_too_large",
        "512000",
        _batch(*(sdk_event(i, properties={"pad": "x" * 20_000}) for i in range(30))),
    ),
    BadRequest(
        "gzip over 500 KB decompressed",
        413,
        "request_too_large",
        "after decompression",
        gzip.compress(_batch(*(sdk_event(i, properties={"pad": "x" * 20_000}) for i in range(30)))),
        headers={**_AUTH, **_JSON, "Content-Encoding": "gzip"},
    ),
    BadRequest("unknown path", 404, "not_found", "/v1/click", _GOOD, path="/v1/click"),
    BadRequest("GET", 405, "method_not_allowed", "GET /v1/batch", method="GET"),
]
