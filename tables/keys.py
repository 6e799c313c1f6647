"""The on-disk form of ``seen_ids`` keys: UUID-shaped message ids in 16 bytes instead of 36.

Most message ids are UUIDs in their canonical text form (``analytics.js`` and the Segment SDKs
send them so). Their 16-byte binary form takes fewer bytes on disk than the compressed text:
zstd packs hex digits into about 4.5 bits each, but not into 4 (``bench/results-scale.md``).
Only the local databases use it: changelog records keep the text key, so a changelog written by
any version restores into any version, and compaction keeps superseding records by the same
key.

Disk form of a key (pure functions, ``tests/unit/test_keys.py``):

- a message id that is a canonical UUID (36 characters, lowercase hex, hyphens at 8, 13, 18
  and 23): ``0xFD`` and its 16 bytes;
- a source-scoped key (``0xFE``, the source's length and name, then the id; ``app/strategy.py``)
  whose id is such a UUID: the same prefix, then ``0xFD`` and the 16 bytes;
- ids of the other common shapes (``ajs-`` and ``ajs-next-`` ids, upper-case and braced
  UUIDs, hex, decimal), plain or scoped: a tag byte 0xF5-0xFC and their packed bytes
  (``tables/key_shapes.py``);
- every other key as it is (other ids, fingerprints).

``0xFD`` never occurs in UTF-8, and message ids are UTF-8, so no key of one form equals one of
another, and :func:`from_disk` gives back the exact text. Both functions map a key already in
disk form to itself (``to_disk(to_disk(k)) == to_disk(k)``).

The databases record which form they hold (:data:`tables.rocks.KEY_FORMAT_KEY`); one of form 1
(only canonical UUIDs packed) is converted in place when opened (``tables/key_migration.py``),
one of any other form rebuilt from the changelog (``tables/partitions.py``).
"""

from __future__ import annotations

from binascii import Error as HexError
from binascii import unhexlify

import numpy as np

from tables.key_prefixes import SCOPED_TAG, UUID_TAG
from tables.key_shapes import TAGS, pack, unpack, uuid_text

#: First byte of a source-scoped key, as an int (``tables/key_prefixes.py``).
SCOPED = SCOPED_TAG[0]
_UUID_BYTE = UUID_TAG[0]
#: ``KEY_FORMAT_KEY``'s value in a database that holds keys in this module's form: the layout of
#: the database as a whole. 3: the keys of form 2, without the age-out index of forms 1 and 2
#: (``tables/key_migration.py`` converts both).
FORMAT = 3


def _uuid16(text: bytes) -> bytes | None:
    """The 16 bytes of a canonical lowercase UUID, or None when ``text`` is not one."""
    if text[8:24:5] != b"----" or len(text) != 36:
        return None
    digits = text.replace(b"-", b"")
    # Exactly 32 hex digits, none of them "A-F" (those would not come back as written).
    if len(digits) != 32 or not (digits.islower() or digits.isdigit()):
        return None
    try:
        return unhexlify(digits)
    except HexError:
        return None


def to_disk(key: bytes) -> bytes:
    """The key as the databases hold it."""
    n = len(key)
    if n == 36:
        raw = _uuid16(key)
        if raw is not None:
            return UUID_TAG + raw
    if n > 2 and key[0] == SCOPED:
        start = 2 + key[1]
        if n - start == 36:
            raw = _uuid16(key[start:])
            if raw is not None:
                return key[:start] + UUID_TAG + raw
        if n > start:
            packed = pack(key[start:])
            return key if packed is None else key[:start] + packed
        return key
    packed = pack(key)
    return key if packed is None else packed


def to_disk_all(keys: list[bytes]) -> list[bytes]:
    """``[to_disk(k) for k in keys]``, in whole-list steps when every key is a canonical UUID
    (a restore's batch of random UUIDs: the per-key checks were 13-15% of its time)."""
    n = len(keys)
    text = b"".join(keys)
    # Every key 36 bytes long: none shorter, and 36 each on average.
    if n == 0 or len(text) != 36 * n or min(map(len, keys)) != 36:
        return [to_disk(k) for k in keys]
    # Hyphens at 8, 13, 18 and 23 of every key and nowhere else; no upper case (it would not
    # come back as written); unhexlify refuses anything else that is not a hex digit.
    hyphens = b"-" * n
    if (
        text[8::36] != hyphens
        or text[13::36] != hyphens
        or text[18::36] != hyphens
        or text[23::36] != hyphens
        or text.count(b"-") != 4 * n
        or text.lower() != text
    ):
        return [to_disk(k) for k in keys]
    try:
        raw = unhexlify(text.replace(b"-", b""))
    except HexError:
        return [to_disk(k) for k in keys]
    disk = np.empty((n, 17), dtype=np.uint8)
    disk[:, 0] = UUID_TAG[0]
    disk[:, 1:] = np.frombuffer(raw, dtype=np.uint8).reshape(n, 16)
    # One 17-byte bytes object per row ("V": raw bytes, trailing zero bytes kept).
    keys_on_disk: list[bytes] = disk.view("V17").ravel().tolist()
    return keys_on_disk


def from_disk(raw: bytes) -> bytes:
    """The key as written (the inverse of :func:`to_disk`)."""
    n = len(raw)
    if n == 17 and raw[0] == _UUID_BYTE:
        return uuid_text(raw[1:])
    if n > 2 and raw[0] == SCOPED:
        start = 2 + raw[1]
        if n - start == 17 and raw[start] == _UUID_BYTE:
            return raw[:start] + uuid_text(raw[start + 1 :])
        if n > start and raw[start] in TAGS:
            text = unpack(raw[start:])
            return raw if text is None else raw[:start] + text
        return raw
    if n and raw[0] in TAGS:
        text = unpack(raw)
        return raw if text is None else text
    return raw
