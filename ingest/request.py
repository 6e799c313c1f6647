"""The pure rules of the ingest service for a request around its events: its content type,
gzip and size, its JSON body, and its write key (from HTTP Basic auth or the body).

No I/O lives here; ``ingest/app.py`` reads the request and asks these functions what to do. Each
raises :class:`~ingest.rejected.Rejected` with the HTTP status, a stable ``code`` and a sentence
that names the problem. The events themselves are ``ingest/events.py``'s.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import json
import zlib
from collections.abc import Mapping
from typing import Any

import orjson

from ingest.rejected import Limits, Rejected, json_type

#: Content types whose body is read as JSON: browsers send JSON as text/plain (a beacon with
#: a string body, analytics.js's fetch), which needs no CORS preflight.
JSON_MEDIA_TYPES = ("application/json", "text/plain")


def check_content_type(mimetype: str, charset: str | None) -> None:
    """Only JSON in UTF-8 is accepted, as application/json or as text/plain (415 otherwise)."""
    if mimetype.lower() not in JSON_MEDIA_TYPES:
        shown = mimetype or "none"
        raise Rejected(
            415,
            "unsupported_media_type",
            "Content-Type must be application/json (or text/plain carrying JSON, as browser "
            f"beacons send it) (got {shown})",
        )
    if charset is not None and charset.lower().replace("-", "") != "utf8":
        raise Rejected(415, "unsupported_media_type", f"charset must be utf-8 (got {charset})")


def is_gzip(content_encoding: str | None) -> bool:
    """True for a gzip body, False for a plain one; any other coding is 415."""
    coding = (content_encoding or "identity").strip().lower()
    if coding in ("", "identity"):
        return False
    if coding in ("gzip", "x-gzip"):
        return True
    raise Rejected(
        415,
        "unsupported_encoding",
        f"Content-Encoding {content_encoding!r} is not supported (use gzip or none)",
    )


def raw_body_limit(limits: Limits, gzip: bool) -> int:
    """Largest body accepted off the wire. A gzip body this long cannot decompress to within
    the batch limit (gzip adds at most a few bytes per 16 KB of incompressible input)."""
    if not gzip:
        return limits.max_batch_bytes
    return limits.max_batch_bytes + limits.max_batch_bytes // 64 + 1024


def too_large(limits: Limits) -> Rejected:
    return Rejected(
        413,
        "request_too_large",
        f"request body is over {limits.max_batch_bytes} bytes (after decompression); the "
        f"limit is {limits.max_batch_bytes} bytes per request (Segment's 500 KB)",
    )


def gunzip(data: bytes, limits: Limits) -> bytes:
    """Decompress a gzip body, never holding more than the batch limit (+1 byte)."""
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, limits.max_batch_bytes + 1)
    except zlib.error as exc:
        raise Rejected(400, "invalid_gzip", f"body is not valid gzip: {exc}") from None
    if len(out) > limits.max_batch_bytes or inflater.unconsumed_tail:
        raise too_large(limits)
    if not inflater.eof:
        raise Rejected(400, "invalid_gzip", "gzip body is truncated")
    if inflater.unused_data:
        raise Rejected(400, "invalid_gzip", "data after the end of the gzip stream")
    return out


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


#: Every ASCII digit to "0", every other byte to "x": a body holds an integer past 64 bits
#: (which orjson would read as a float, losing digits) only if its image holds
#: :data:`_LONG_RUN`; such bodies take the standard library's parser, which keeps them. (A
#: translate and a find: a regular expression for the run took several times orjson's parse.)
_DIGITS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x78 for b in range(256))
_LONG_RUN = b"0" * 19


def parse_json(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object (400 when it is not one).

    orjson parses it when it can (several times faster: the parse is a large share of a
    request's CPU, ``make bench-ingest``); anything orjson refuses, or a body with integers it
    would not keep exact, goes through the standard library's parser, whose verdict and
    message stand (it also accepts lone surrogate escapes, which the event check refuses
    later with its own message)."""
    if _LONG_RUN not in body.translate(_DIGITS):
        try:
            fast = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass
        else:
            if isinstance(fast, dict):
                return fast
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Rejected(400, "invalid_json", f"body is not UTF-8 (byte {exc.start})") from None
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except ValueError as exc:  # JSONDecodeError, NaN/Infinity, int digit limits
        raise Rejected(400, "invalid_json", f"body is not valid JSON: {exc}"[:300]) from None
    except RecursionError:
        raise Rejected(400, "invalid_json", "body JSON is nested too deeply") from None
    if not isinstance(doc, dict):
        raise Rejected(400, "invalid_body", f"body must be a JSON object, not {json_type(doc)}")
    return doc


# --- the write key ------------------------------------------------------------------------------


def basic_auth_user(authorization: str | None) -> str | None:
    """The user name of an HTTP Basic ``Authorization`` header (the write key), else None."""
    if not authorization:
        return None
    scheme, _, credentials = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(credentials.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise Rejected(401, "unauthorized", "malformed Basic Authorization header") from None
    user, _, _password = decoded.partition(":")
    return user


def body_write_key(doc: Mapping[str, Any]) -> str | None:
    """The body's ``writeKey`` (Segment accepts it instead of Basic auth)."""
    key = doc.get("writeKey")
    return key if isinstance(key, str) else None


def authorize(write_key: str | None, accepted: frozenset[str]) -> None:
    """401 unless the key is one of ``accepted``; an empty set means the service is open."""
    if not accepted:
        return
    if not write_key:
        raise Rejected(
            401,
            "unauthorized",
            "no write key: send it as the HTTP Basic user name (password empty) or as "
            "'writeKey' in the body",
        )
    given = write_key.encode("utf-8", "surrogatepass")
    if not any(hmac.compare_digest(given, key.encode()) for key in accepted):  # constant time
        raise Rejected(401, "unauthorized", "unknown write key")
