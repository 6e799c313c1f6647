"""Table-driven tests of ``ingest/request.py``: content type and encoding, gzip, JSON, write keys.
No broker, no HTTP."""

from __future__ import annotations

import gzip

import pytest

from ingest.rejected import Rejected
from ingest.request import (
    authorize,
    basic_auth_user,
    check_content_type,
    gunzip,
    is_gzip,
    parse_json,
)
from tests.ingest.events_support import LIMITS, rejected
from tests.ingest.support import basic

# --- content type and encoding ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mimetype", "charset"),
    [
        ("application/json", None),
        ("application/json", "utf-8"),
        ("Application/JSON", "UTF8"),
        ("text/plain", None),  # browser beacons (navigator.sendBeacon with a string)
        ("text/plain", "UTF-8"),
    ],
)
def test_json_content_types_are_accepted(mimetype: str, charset: str | None) -> None:
    check_content_type(mimetype, charset)


@pytest.mark.parametrize(
    ("mimetype", "charset", "named"),
    [
        ("text/html", None, "text/html"),
        ("", None, "none"),
        ("text/plain", "latin-1", "latin-1"),
        ("application/x-www-form-urlencoded", None, "form-urlencoded"),
        ("application/json", "latin-1", "latin-1"),
    ],
)
def test_other_content_types_are_415(mimetype: str, charset: str | None, named: str) -> None:
    with pytest.raises(Rejected) as exc:
        check_content_type(mimetype, charset)
    assert named in rejected(exc, 415, "unsupported_media_type")


@pytest.mark.parametrize(
    ("header", "expected"), [(None, False), ("identity", False), ("gzip", True), ("GZIP", True)]
)
def test_content_encodings(header: str | None, expected: bool) -> None:
    assert is_gzip(header) is expected


@pytest.mark.parametrize("header", ["br", "deflate", "gzip, br", "zstd"])
def test_unsupported_content_encodings_are_415(header: str) -> None:
    with pytest.raises(Rejected) as exc:
        is_gzip(header)
    assert header in rejected(exc, 415, "unsupported_encoding")


def test_gunzip_round_trip() -> None:
    assert gunzip(gzip.compress(b'{"a": 1}'), LIMITS) == b'{"a": 1}'


def test_gunzip_stops_at_the_batch_limit_without_inflating_a_bomb() -> None:
    bomb = gzip.compress(b" " * (50 * 1024 * 1024))  # 50 MiB of blanks, about 50 KB gzipped
    assert len(bomb) < 100_000
    with pytest.raises(Rejected) as exc:
        gunzip(bomb, LIMITS)
    assert "512000" in rejected(exc, 413, "request_too_large")


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"not gzip at all", "not valid gzip"),
        (gzip.compress(b'{"a": 1}')[:-6], "truncated"),
        (gzip.compress(b"{}") + b"junk", "after the end"),
    ],
)
def test_bad_gzip_is_400(data: bytes, fragment: str) -> None:
    with pytest.raises(Rejected) as exc:
        gunzip(data, LIMITS)
    assert fragment in rejected(exc, 400, "invalid_gzip")


# --- JSON ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "code", "fragment"),
    [
        (b'{"batch": [', "invalid_json", "not valid JSON"),
        (b"\xff\xfe{}", "invalid_json", "not UTF-8"),
        (b'{"x": NaN}', "invalid_json", "NaN"),
        (b'{"x": Infinity}', "invalid_json", "Infinity"),
        (b"[" * 100_000 + b"]" * 100_000, "invalid_json", "nested too deeply"),
        (b"[1, 2]", "invalid_body", "not an array"),
        (b'"text"', "invalid_body", "not a string"),
        (b"null", "invalid_body", "not null"),
    ],
)
def test_bad_json_is_400(body: bytes, code: str, fragment: str) -> None:
    with pytest.raises(Rejected) as exc:
        parse_json(body)
    assert fragment in rejected(exc, 400, code)


# --- write keys ------------------------------------------------------------------------------


def test_basic_auth_user_is_the_write_key() -> None:
    assert basic_auth_user(basic("k1")) == "k1"
    assert basic_auth_user("Basic " + "azE6c2VjcmV0") == "k1"  # "k1:secret": password ignored
    assert basic_auth_user(None) is None
    assert basic_auth_user("Bearer abc") is None


def test_malformed_basic_auth_is_401() -> None:
    with pytest.raises(Rejected) as exc:
        basic_auth_user("Basic !!!not-base64")
    rejected(exc, 401, "unauthorized")


def test_authorize() -> None:
    authorize(None, frozenset())  # open service
    authorize("anything", frozenset())
    authorize("k1", frozenset({"k1", "k2"}))
    for key, fragment in ((None, "no write key"), ("", "no write key"), ("k3", "unknown")):
        with pytest.raises(Rejected) as exc:
            authorize(key, frozenset({"k1", "k2"}))
        assert fragment in rejected(exc, 401, "unauthorized")
