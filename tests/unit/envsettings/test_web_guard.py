"""The services' token check (envsettings/tokens.py): Bearer and Basic carry it, anything else does
not, and no token means open."""

from __future__ import annotations

import base64

import pytest

from envsettings.tokens import allowed, presented


def basic(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    ("header", "ok"),
    [
        ("Bearer s3cret", True),
        ("bearer  s3cret ", True),
        (basic("ops", "s3cret"), True),
        (basic("", "s3cret"), True),
        ("Bearer wrong", False),
        (basic("s3cret", ""), False),  # the token as the user name is not the password
        ("Basic not-base64!", False),
        ("Token s3cret", False),
        ("", False),
        (None, False),
    ],
)
def test_the_token_is_taken_from_bearer_or_the_basic_password(header: str | None, ok: bool) -> None:
    assert allowed("s3cret", header) is ok


def test_without_a_token_everything_is_allowed() -> None:
    assert allowed("", None) and allowed("", "Bearer anything")


def test_presented_reads_the_password_after_the_first_colon() -> None:
    assert presented(basic("u", "a:b")) == "a:b"
