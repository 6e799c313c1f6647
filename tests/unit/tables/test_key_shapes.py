"""The compact disk forms of the common non-canonical id shapes (tables/keys.py, through
tables/keys.py): each shape packed, plain and scoped, and every byte string back as written."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from app.strategy import scoped_key
from tables.keys import (
    AJS,
    AJS_NEXT,
    BRACED,
    BRACED_UPPER,
    DECIMAL,
    HEX,
    HEX_UPPER,
    UPPER_UUID,
    from_disk,
    to_disk,
)

RAW16 = st.binary(min_size=16, max_size=16)
SOURCES = st.text(min_size=1, max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass"))


def _uuid(raw: bytes) -> bytes:
    h = raw.hex().encode()
    return h[:8] + b"-" + h[8:12] + b"-" + h[12:16] + b"-" + h[16:20] + b"-" + h[20:]


def _has_letter(text: bytes) -> bool:
    return any(c in b"abcdefABCDEF" for c in text)


AJS_IDS = RAW16.map(lambda r: b"ajs-" + r.hex().encode())
AJS_NEXT_IDS = st.tuples(st.integers(0, 2**48 - 1), RAW16).map(
    lambda t: b"ajs-next-%d-" % t[0] + _uuid(t[1])
)
UPPER_UUIDS = RAW16.map(lambda r: _uuid(r).upper()).filter(_has_letter)
BRACED_UUIDS = RAW16.map(lambda r: b"{" + _uuid(r) + b"}")
BRACED_UPPER_UUIDS = RAW16.map(lambda r: b"{" + _uuid(r).upper() + b"}").filter(_has_letter)
DECIMALS = st.integers(0, 10**19 - 1).map(lambda i: str(i).encode())
HEXES = st.binary(min_size=4, max_size=64).map(lambda r: r.hex().encode())
HEX_UPPERS = st.binary(min_size=4, max_size=64).map(lambda r: r.hex().upper().encode())


def _check(text: bytes, tag: int, size: int, source: bytes) -> None:
    disk = to_disk(text)
    assert disk[0] == tag and len(disk) == size
    assert from_disk(disk) == text and to_disk(disk) == disk
    scoped = scoped_key(text, source)
    start = 2 + len(source)
    assert to_disk(scoped) == scoped[:start] + disk
    assert from_disk(to_disk(scoped)) == scoped


@given(AJS_IDS, SOURCES)
def test_an_ajs_id_takes_17_bytes(text: bytes, source: bytes) -> None:
    _check(text, AJS, 17, source)


@given(AJS_NEXT_IDS, SOURCES)
def test_an_ajs_next_id_takes_23_bytes(text: bytes, source: bytes) -> None:
    """analytics.js's messageId today: ajs-next-<Date.now()>-<uuid>, 59 characters."""
    _check(text, AJS_NEXT, 23, source)


def test_ajs_next_near_misses_stay_as_written() -> None:
    uuid = b"0f8fad5b-d9cb-469f-a165-70867728950e"
    assert to_disk(b"ajs-next-1764288000000-" + uuid)[0] == AJS_NEXT
    for text in (
        b"ajs-next-01764288000000-" + uuid,  # leading zero
        b"ajs-next-%d-" % 2**48 + uuid,  # past 6 bytes
        b"ajs-next-1764288000000-" + uuid.upper(),
        b"ajs-next--" + uuid,
        b"ajs-next-1764288000000_" + uuid,
    ):
        assert to_disk(text) == text


@given(UPPER_UUIDS, SOURCES)
def test_an_upper_case_uuid_takes_17_bytes(text: bytes, source: bytes) -> None:
    _check(text, UPPER_UUID, 17, source)


@given(BRACED_UUIDS, SOURCES)
def test_a_braced_uuid_takes_17_bytes(text: bytes, source: bytes) -> None:
    _check(text, BRACED, 17, source)


@given(BRACED_UPPER_UUIDS, SOURCES)
def test_a_braced_upper_case_uuid_takes_17_bytes(text: bytes, source: bytes) -> None:
    _check(text, BRACED_UPPER, 17, source)


@given(DECIMALS, SOURCES)
def test_a_decimal_number_takes_its_minimal_bytes(text: bytes, source: bytes) -> None:
    value = int(text)
    _check(text, DECIMAL, 1 + max(1, (value.bit_length() + 7) // 8), source)


@given(HEXES, SOURCES)
def test_lowercase_hex_takes_half_its_length(text: bytes, source: bytes) -> None:
    if text.isdigit() and len(text) <= 19 and (text[0] != 0x30 or len(text) == 1):
        return  # a decimal number: that shape is tried first (test above)
    _check(text, HEX, 1 + len(text) // 2, source)


@given(HEX_UPPERS.filter(_has_letter), SOURCES)
def test_upper_case_hex_takes_half_its_length(text: bytes, source: bytes) -> None:
    _check(text, HEX_UPPER, 1 + len(text) // 2, source)


def test_near_misses_stay_as_written() -> None:
    for text in (
        b"007",  # leading zero
        b"12345678901234567890",  # 20 digits: even length, so it is hex instead
        b"abc",  # odd-length hex
        b"aBcD",  # mixed case
        b"ajs-" + b"A" * 32,
        b"{0f8fad5b-d9cb-469f-a165-70867728950e",
        b"0" * 130,
        b"cafe",  # hex shorter than MIN_HEX
    ):
        disk = to_disk(text)
        assert from_disk(disk) == text
    assert to_disk(b"007") == b"007" and to_disk(b"abc") == b"abc"
    assert to_disk(b"aBcD") == b"aBcD" and to_disk(b"0" * 130) == b"0" * 130
    assert to_disk(b"cafe") == b"cafe" and to_disk(b"cafe0123") != b"cafe0123"


ANY = st.one_of(
    st.binary(max_size=60),
    AJS_IDS,
    AJS_NEXT_IDS,
    UPPER_UUIDS,
    BRACED_UUIDS,
    DECIMALS,
    HEXES,
    HEX_UPPERS,
    st.text(max_size=40).map(lambda s: s.encode("utf-8", "surrogatepass")),
)
TEXTS = ANY.filter(lambda k: to_disk(k) == k or from_disk(k) == k)


@given(ANY)
def test_every_byte_string_comes_back(key: bytes) -> None:
    """Any bytes, tag bytes included: a key is either packed (and unpacked) or kept as it is;
    a tagged key that pack would not have written is not decoded."""
    disk = to_disk(key)
    assert to_disk(disk) == disk
    if from_disk(key) == key:
        assert from_disk(disk) == key


@given(ANY, ANY)
def test_no_two_texts_share_a_disk_form(a: bytes, b: bytes) -> None:
    if from_disk(a) == a and from_disk(b) == b:
        assert (to_disk(a) == to_disk(b)) == (a == b)
