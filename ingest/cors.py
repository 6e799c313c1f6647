"""Cross-origin (CORS) rules of the ingest service: which web pages may send events from a
browser, and the headers of a preflight and of an answer. Pure functions; ``ingest/app.py``
applies them.

Why a browser needs them: analytics.js (``@segment/analytics-next``) posts every request with
``fetch`` and the header ``Authorization: Basic base64("<writeKey>:")``, plus ``X-Retry-Count``
on retries (segmentio/analytics-next, ``packages/browser/src/plugins/segmentio/
fetch-dispatcher.ts`` and ``batched-dispatcher.ts``). Those headers are not CORS-safelisted, so
before a POST from a page on another origin the browser sends a preflight (``OPTIONS`` with
``Origin``, ``Access-Control-Request-Method`` and ``Access-Control-Request-Headers``) and posts
only if the answer allows the origin, the method and every header. It lets the page, and the
SDK's retry logic, read an answer (a 400's error too) only if the answer carries
``Access-Control-Allow-Origin``.

What is safe: the credential is the write key, sent in the Authorization header and public on
every page that embeds the SDK; the service reads no cookies. So by default any origin may send
(``*``), as Segment's own API allows. The service never answers
``Access-Control-Allow-Credentials``: a page that sends with ``credentials: 'include'`` is
refused by the browser, so the cookies of a site's visitors never reach the service. CORS is not
access control: servers and curl send no ``Origin``, and a browser's simple request (text/plain,
no Authorization) is sent whatever the answer; the write keys are the access control.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

ANY_ORIGIN = "*"
#: The setting's word for "no origin" (an empty variable means unset: the default, ``*``).
NO_ORIGIN = "none"

#: The one method a page may use on the tracking paths.
ALLOWED_METHODS = ("POST",)

#: Request headers a page may send: analytics.js's (Content-Type, Authorization, X-Retry-Count)
#: and Content-Encoding (gzip bodies are accepted). Always answered in full, so the preflight a
#: browser caches for the first send also covers the X-Retry-Count of the retries. Listed one by
#: one: the wildcard "*" of Access-Control-Allow-Headers never covers Authorization.
ALLOWED_HEADERS = ("authorization", "content-type", "content-encoding", "x-retry-count")

#: How long a browser may reuse a preflight's answer; Chromium caps it at 7200 seconds.
MAX_AGE_SECONDS = 7200

#: How many refused origins are remembered (each logged once); more are not logged, so a flood
#: of made-up Origin headers can neither grow the memory nor the log.
REFUSED_ORIGINS_LOGGED = 1000

_ORIGIN = re.compile(r"^(https?)://([a-z0-9.-]+|\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?$")
_DEFAULT_PORT = {"http": "80", "https": "443"}


def normalize_origin(text: str) -> str:
    """An origin as browsers serialize it: lower case, no trailing slash, no default port."""
    origin = text.strip().lower().removesuffix("/")
    match = _ORIGIN.match(origin)
    if match and match.group(3) == _DEFAULT_PORT[match.group(1)]:
        return f"{match.group(1)}://{match.group(2)}"
    return origin


def origin_problems(text: str, env: str) -> list[str]:
    """What is wrong with a comma list of origins (``env`` names the variable)."""
    entries = [entry.strip() for entry in text.split(",") if entry.strip()]
    out = [
        f"{env}: {entry!r} is not an origin (scheme://host[:port], http or https, no path)"
        for entry in entries
        if entry not in (ANY_ORIGIN, NO_ORIGIN) and not _ORIGIN.match(normalize_origin(entry))
    ]
    if ANY_ORIGIN in entries and len(entries) > 1:
        out.append(f"{env}: '*' already allows every origin; list origins or give '*' alone")
    if NO_ORIGIN in entries and len(entries) > 1:
        out.append(f"{env}: 'none' allows no origin; list origins or give 'none' alone")
    return out


@dataclass(frozen=True, slots=True)
class CorsPolicy:
    """The origins whose pages may call the service: every one (``*``), a list, or none."""

    origins: frozenset[str] = frozenset()
    any_origin: bool = False

    @classmethod
    def parse(cls, text: str) -> CorsPolicy:
        """From the setting's comma list (checked by :func:`origin_problems`)."""
        entries = [entry.strip() for entry in text.split(",") if entry.strip()]
        if ANY_ORIGIN in entries:
            return cls(any_origin=True)
        listed = (entry for entry in entries if entry != NO_ORIGIN)
        return cls(origins=frozenset(normalize_origin(entry) for entry in listed))

    def allows(self, origin: str) -> bool:
        return self.any_origin or normalize_origin(origin) in self.origins


def allow_origin(policy: CorsPolicy, origin: str | None) -> str | None:
    """The value of Access-Control-Allow-Origin for a request from ``origin``; None: the request
    carries no Origin, or one the policy refuses, and the answer gets no CORS header."""
    if origin is None or not policy.allows(origin):
        return None
    # A literal "*" (not the echoed origin) for an open policy: browsers refuse it for
    # credentialed requests, which is the point.
    return ANY_ORIGIN if policy.any_origin else origin


def answer_headers(policy: CorsPolicy, origin: str | None) -> dict[str, str]:
    """Headers added to every answer of a tracking path (a preflight, a 200, a 400...)."""
    # Vary: caches must not serve one origin's answer to another (the header differs).
    headers = {"Vary": "Origin"}
    value = allow_origin(policy, origin)
    if value is not None:
        headers["Access-Control-Allow-Origin"] = value
    return headers


def preflight_headers(policy: CorsPolicy, origin: str | None) -> dict[str, str] | None:
    """The allow headers of a preflight's 204 (besides :func:`answer_headers`); None: the origin
    is refused (403, no allow header)."""
    if allow_origin(policy, origin) is None:
        return None
    return {
        "Access-Control-Allow-Methods": ", ".join(ALLOWED_METHODS),
        "Access-Control-Allow-Headers": ", ".join(ALLOWED_HEADERS),
        "Access-Control-Max-Age": str(MAX_AGE_SECONDS),
    }


def refusal(policy: CorsPolicy, origin: str, env: str) -> str:
    """The sentence of a refused origin's 403 and log line."""
    if not policy.any_origin and not policy.origins:
        return f"cross-origin requests are off ({env}=none); origin {origin!r} refused"
    return f"origin {origin!r} is not in {env}"


class RefusedOrigins:
    """The refused origins already logged: each is logged once, not at every request."""

    def __init__(self, limit: int = REFUSED_ORIGINS_LOGGED) -> None:
        self.limit = limit
        self.seen: set[str] = set()

    def first_time(self, origin: str) -> bool:
        """True the first time ``origin`` is refused (while fewer than ``limit`` are known)."""
        key = normalize_origin(origin)
        if key in self.seen or len(self.seen) >= self.limit:
            return False
        self.seen.add(key)
        return True
