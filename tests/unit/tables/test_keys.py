"""The disk form of ``seen_ids`` keys (tables/keys.py): canonical UUIDs in 17 bytes, every key
back exactly as written, no two keys the same on disk."""

from __future__ import annotations

import uuid

from hypothesis import given, settings
from hypothesis import strategies as st

from app.strategy import fingerprint_key, scoped_key
from tables.key_prefixes import UUID_TAG
from tables.keys import from_disk, to_disk, to_disk_all

UUIDS = st.uuids().map(lambda u: str(u).encode())
TEXT_IDS = st.text(min_size=1, max_size=80).map(lambda s: s.encode("utf-8", "surrogatepass"))
SOURCES = st.text(min_size=1, max_size=20).map(lambda s: s.encode("utf-8", "surrogatepass"))
FINGERPRINTS = st.binary(min_size=16, max_size=16).map(lambda b: fingerprint_key(b.hex()))
IDS = st.one_of(UUIDS, TEXT_IDS, UUIDS.map(bytes.upper))
KEYS = st.one_of(IDS, FINGERPRINTS, st.tuples(IDS, SOURCES).map(lambda t: scoped_key(t[0], t[1])))


def test_a_canonical_uuid_takes_17_bytes() -> None:
    text = b"0f8fad5b-d9cb-469f-a165-70867728950e"
    disk = to_disk(text)
    assert disk == UUID_TAG + uuid.UUID(text.decode()).bytes
    assert from_disk(disk) == text


def test_a_scoped_uuid_keeps_its_source_and_takes_17_bytes_after_it() -> None:
    text = scoped_key(b"0f8fad5b-d9cb-469f-a165-70867728950e", b"web")
    disk = to_disk(text)
    assert disk == text[:5] + UUID_TAG + bytes.fromhex("0f8fad5bd9cb469fa16570867728950e")
    assert from_disk(disk) == text


def test_what_has_no_compact_shape_stays_as_written() -> None:
    for text in (
        b"0f8fad5b-d9cb-469f-a165-70867728950",  # 35 characters
        b"0f8fad5bd9cb-469f-a165-70867728950e-",  # hyphens elsewhere
        b"0f8fad5b-d9cb-469f-a165-70867728950g",  # not hex
        b"0f8fad5b-d9cb-469f-a165-7086-728950e",  # a fifth hyphen
        b"order-42",
        fingerprint_key("00" * 16),
    ):
        assert to_disk(text) == text and from_disk(text) == text


@given(KEYS)
def test_every_key_comes_back_exactly(key: bytes) -> None:
    assert from_disk(to_disk(key)) == key


@given(KEYS)
def test_the_disk_form_is_a_fixed_point(key: bytes) -> None:
    disk = to_disk(key)
    assert to_disk(disk) == disk and from_disk(disk) == key


@given(KEYS, KEYS)
def test_two_keys_never_share_a_disk_form(a: bytes, b: bytes) -> None:
    assert (to_disk(a) == to_disk(b)) == (a == b)


@given(UUIDS)
def test_every_canonical_uuid_is_compact(text: bytes) -> None:
    assert len(to_disk(text)) == 17


@given(st.lists(KEYS, max_size=30))
def test_a_list_of_keys_takes_the_disk_form_of_each(keys: list[bytes]) -> None:
    assert to_disk_all(keys) == [to_disk(k) for k in keys]


@given(st.lists(UUIDS, min_size=1, max_size=30), st.data())
def test_one_key_out_of_form_in_a_list_of_uuids_keeps_its_own_form(
    keys: list[bytes], data: st.DataObject
) -> None:
    """The whole-list path (every key a canonical UUID) must notice a single key that is not,
    wherever it is and whatever is wrong with it, and give each key its own disk form."""
    assert to_disk_all(keys) == [
        UUID_TAG + bytes.fromhex(k.decode().replace("-", "")) for k in keys
    ]
    at = data.draw(st.integers(0, len(keys) - 1))
    odd = data.draw(
        st.sampled_from(
            [
                keys[at].upper(),
                keys[at][:-1] + b"g",
                keys[at][:-1],  # 35 characters ...
                keys[at] + b"0",  # ... or 37
                keys[at][:9] + b"-" + keys[at][10:],  # a fifth hyphen
                keys[at][:8] + b"0" + keys[at][9:],  # a hyphen missing
                keys[at][:-1] + "é".encode()[:1],
            ]
        )
    )
    mixed = [*keys[:at], odd, *keys[at + 1 :]]
    assert to_disk_all(mixed) == [to_disk(k) for k in mixed]
    assert to_disk(odd) == odd or odd == keys[at].upper()


HEX_32 = st.binary(min_size=16, max_size=16).map(lambda b: b.hex().encode())
AJS_IDS = HEX_32.map(lambda h: b"ajs-" + h)


def _hyphens_at(hexes: bytes, at: list[int]) -> bytes:
    out = bytearray(hexes)
    for i in sorted(at):
        out.insert(i, ord("-"))
    return bytes(out)


#: 32 hex digits and 4 hyphens anywhere (a UUID's places among them), or ``ajs-`` anywhere.
LOOKALIKES = st.one_of(
    st.tuples(HEX_32, st.lists(st.integers(0, 35), min_size=4, max_size=4, unique=True)).map(
        lambda t: _hyphens_at(*t)
    ),
    st.tuples(HEX_32, st.integers(0, 32)).map(lambda t: t[0][: t[1]] + b"ajs-" + t[0][t[1] :]),
)
#: 36-byte keys of every kind: canonical UUIDs, classic ajs- ids, and what only looks like them.
KEYS_36 = st.one_of(
    UUIDS,
    AJS_IDS,
    UUIDS.map(bytes.upper),
    AJS_IDS.map(bytes.upper),
    st.binary(min_size=36, max_size=36),
    LOOKALIKES,
    st.tuples(st.one_of(UUIDS, AJS_IDS), st.integers(0, 35), st.binary(min_size=1, max_size=1)).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :]  # one byte changed anywhere
    ),
)


@settings(max_examples=300)
@given(st.lists(KEYS_36, min_size=1, max_size=40))
def test_36_byte_keys_of_mixed_shapes_take_the_disk_form_of_each(keys: list[bytes]) -> None:
    """The array path for batches of UUIDs and ``ajs-`` ids (several SDKs writing to one
    topic) gives each key the form :func:`to_disk` gives it, whatever else is among them."""
    assert to_disk_all(keys) == [to_disk(k) for k in keys]


def test_what_only_looks_like_ajs_ids_and_uuids_among_them_keeps_its_own_form() -> None:
    """Keys the whole-text checks of a mixed batch must tell apart: four hyphens where
    ``ajs-`` would be, ``ajs-`` inside a key, ``aj`` and ``s-`` across two keys, a fifth
    hyphen, upper case."""
    u = b"0f8fad5b-d9cb-469f-a165-70867728950e"
    a = b"ajs-" + bytes(range(16)).hex().encode()
    hexes = bytes(range(16, 32)).hex().encode()
    for odd in (
        b"----" + hexes,
        hexes[:4] + b"----" + hexes[4:],
        b"aj-s" + hexes,
        hexes[:4] + b"ajs-" + hexes[4:],
        u[:-2] + b"aj",
        u[:30] + b"ajs-" + u[34:],
        b"ajs-" + hexes[:-1] + b"-",
        a.upper(),
        b"ajs-" + hexes[:-1] + b"g",
    ):
        assert len(odd) == 36
        for keys in ([u, a, odd], [odd, a, u], [a, odd, b"s-" + u[2:]], [odd, odd, a]):
            assert to_disk_all(keys) == [to_disk(k) for k in keys], keys


def test_uuids_that_shift_across_each_other_are_not_taken_as_uuids() -> None:
    """A 37-character key then a 35-character one line up in the joined text like two UUIDs."""
    a = b"0f8fad5b-d9cb-469f-a165-70867728950e"
    shifted = [a + b"0", a[1:]]
    assert to_disk_all(shifted) == shifted
