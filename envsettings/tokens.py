"""The token check of the services' operator endpoints (the worker's ``DEDUPE_WEB_TOKEN``, the
ingest service's ``DEDUPE_INGEST_METRICS_TOKEN``): a request carries the token as
``Authorization: Bearer <token>`` or as the password of HTTP Basic authentication (any user
name), compared in constant time."""

from __future__ import annotations

import base64
import binascii
import hmac


def presented(authorization: str | None) -> str | None:
    """The token a request's ``Authorization`` header carries, if any."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() == "bearer":
        return value.strip()
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2]
    return None


def allowed(token: str, authorization: str | None) -> bool:
    """True without a token, or when the request presents it (compared in constant time)."""
    if not token:
        return True
    given = presented(authorization)
    return given is not None and hmac.compare_digest(given.encode(), token.encode())
