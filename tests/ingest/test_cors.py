"""Table-driven tests of ``ingest/cors.py``: which origins are allowed, and the headers of a
preflight and of an answer. No broker, no HTTP (``test_cors_http.py`` sends real preflights to
the real service)."""

from __future__ import annotations

import pytest

from ingest.cors import (
    ALLOWED_HEADERS,
    CorsPolicy,
    RefusedOrigins,
    allow_origin,
    answer_headers,
    normalize_origin,
    origin_problems,
    preflight_headers,
    refusal,
)

ENV = "DEDUPE_INGEST_CORS_ORIGINS"
ANY = CorsPolicy.parse("*")
LISTED = CorsPolicy.parse("https://shop.example, http://localhost:3000")
NONE = CorsPolicy.parse("none")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("https://shop.example", "https://shop.example"),
        ("HTTPS://Shop.Example/", "https://shop.example"),
        ("https://shop.example:443", "https://shop.example"),
        ("http://shop.example:80", "http://shop.example"),
        ("https://shop.example:8443", "https://shop.example:8443"),
        ("http://[::1]:3000", "http://[::1]:3000"),
    ],
)
def test_origins_are_compared_as_browsers_serialize_them(text: str, expected: str) -> None:
    assert normalize_origin(text) == expected


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("shop.example", "'shop.example' is not an origin"),
        ("https://shop.example/app", "'https://shop.example/app' is not an origin"),
        ("ftp://shop.example", "'ftp://shop.example' is not an origin"),
        ("null", "'null' is not an origin"),
        ("*, https://shop.example", "'*' already allows every origin"),
        ("none, https://shop.example", "'none' allows no origin"),
    ],
)
def test_bad_origin_lists_are_named(text: str, fragment: str) -> None:
    problems = origin_problems(text, ENV)
    assert len(problems) == 1 and fragment in problems[0] and problems[0].startswith(ENV)


@pytest.mark.parametrize(
    "text", ["", "*", " * ", "none", "https://a.example, http://127.0.0.1:19510"]
)
def test_good_origin_lists_have_no_problem(text: str) -> None:
    assert origin_problems(text, ENV) == []


@pytest.mark.parametrize(
    ("policy", "origin", "expected"),
    [
        (ANY, "https://anyone.example", "*"),
        (ANY, "null", "*"),  # sandboxed frames and file:// pages send "null"
        (ANY, None, None),  # servers and curl send no Origin: nothing to allow
        (LISTED, "https://shop.example", "https://shop.example"),
        (LISTED, "http://localhost:3000", "http://localhost:3000"),
        (LISTED, "https://shop.example.evil.example", None),
        (LISTED, "http://shop.example", None),  # another scheme is another origin
        (LISTED, "http://localhost:3001", None),  # so is another port
        (LISTED, "null", None),
        (NONE, "https://shop.example", None),
    ],
)
def test_allow_origin(policy: CorsPolicy, origin: str | None, expected: str | None) -> None:
    assert allow_origin(policy, origin) == expected


def test_an_answer_varies_by_origin_and_allows_only_an_allowed_one() -> None:
    assert answer_headers(LISTED, "https://shop.example") == {
        "Vary": "Origin",
        "Access-Control-Allow-Origin": "https://shop.example",
    }
    assert answer_headers(LISTED, "https://other.example") == {"Vary": "Origin"}
    assert answer_headers(ANY, "https://other.example")["Access-Control-Allow-Origin"] == "*"


def test_a_preflight_allows_post_and_the_sdk_headers_and_never_credentials() -> None:
    headers = preflight_headers(ANY, "https://anyone.example")
    assert headers is not None
    assert headers["Access-Control-Allow-Methods"] == "POST"
    granted = {h.strip() for h in headers["Access-Control-Allow-Headers"].split(",")}
    # analytics.js: Content-Type text/plain, Authorization Basic, X-Retry-Count on retries
    assert {"authorization", "content-type", "x-retry-count"} <= granted
    assert granted == set(ALLOWED_HEADERS) and "*" not in granted
    assert int(headers["Access-Control-Max-Age"]) > 0
    assert not any("credentials" in name.lower() for name in headers)


def test_a_preflight_from_a_refused_origin_gets_no_allow_header() -> None:
    assert preflight_headers(LISTED, "https://other.example") is None
    assert preflight_headers(NONE, "https://shop.example") is None
    assert preflight_headers(LISTED, None) is None


def test_the_refusal_names_the_origin_and_the_setting() -> None:
    assert (
        refusal(LISTED, "https://x.example", ENV) == f"origin 'https://x.example' is not in {ENV}"
    )
    assert f"({ENV}=none)" in refusal(NONE, "https://x.example", ENV)
    assert CorsPolicy.parse("") == NONE  # (an empty variable is unset: the default, '*')


def test_a_refused_origin_is_logged_once_and_the_memory_is_bounded() -> None:
    refused = RefusedOrigins(limit=2)
    assert refused.first_time("https://a.example")
    assert not refused.first_time("https://a.example")
    assert not refused.first_time("HTTPS://A.example/")
    assert refused.first_time("https://b.example")
    assert not refused.first_time("https://c.example")  # past the limit: not logged
    assert refused.seen == {"https://a.example", "https://b.example"}
