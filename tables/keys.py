"""The on-disk form of ``seen_ids`` keys: UUID-shaped message ids in 16 bytes instead of 36.

Most message ids are UUIDs in their canonical text form (``analytics.js`` and the Segment SDKs
send them so). Their 16-byte binary form takes fewer bytes on disk than the compressed text:
zstd packs hex digits into about 4.5 bits each, but not into 4 (``bench/results-scale.md``).
Only the local databases use it: changelog records keep the text key, so a changelog written by
any version restores into any version, and compaction keeps superseding records by the same
key.

Disk form of a key (pure functions, ``tests/unit/tables/test_keys.py``):

- a message id that is a canonical UUID (36 characters, lowercase hex, hyphens at 8, 13, 18
  and 23): ``0xFD`` and its 16 bytes;
- a source-scoped key (``0xFE``, the source's length and name, then the id; ``app/strategy.py``)
  whose id is such a UUID: the same prefix, then ``0xFD`` and the 16 bytes;
- ids of the other common shapes (``ajs-`` and ``ajs-next-`` ids, upper-case and braced
  UUIDs, hex, decimal), plain or scoped: a tag byte 0xF5-0xFC and their packed bytes
  (the compact forms of the other shapes, below);
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
    (a restore's batch of random UUIDs: the per-key checks were 13-15% of its time) or each is
    a UUID or a classic ``ajs-`` id (a topic several SDKs write to)."""
    n = len(keys)
    text = b"".join(keys)
    # Every key 36 bytes long: none shorter, and 36 each on average.
    if n == 0 or len(text) != 36 * n or min(map(len, keys)) != 36:
        return [to_disk(k) for k in keys]
    packed = _uuids(text, n)
    if packed is None:
        packed = _uuids_and_ajs(text, n)
    return [to_disk(k) for k in keys] if packed is None else packed


def _uuids(text: bytes, n: int) -> list[bytes] | None:
    """The disk forms of ``n`` 36-byte keys joined in ``text`` when every one is a canonical
    UUID (None: not every one)."""
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
        return None
    try:
        raw = unhexlify(text.replace(b"-", b""))
    except HexError:
        return None
    return _tagged_16(_UUID_BYTE, raw, n)


def _uuids_and_ajs(text: bytes, n: int) -> list[bytes] | None:
    """The disk forms of ``n`` 36-byte keys joined in ``text`` when each is a canonical UUID or
    a classic ``ajs-`` id (``ajs-`` and 32 lowercase hex digits: the two shapes :func:`to_disk`
    gives 17 bytes); None when one is neither.

    With ``ajs-`` written as four hyphens, both shapes are four hyphens and 32 hex digits: a
    UUID's at 8, 13, 18 and 23, an ``ajs-`` id's at 0-3. Exactly 4 hyphens per key on average,
    each key with 4 at one of those places, leaves none anywhere else; as many ``ajs-`` in the
    text as keys with hyphens at 0-3 means each of those begins with ``ajs-`` (a hyphen written
    by the text itself would be a fifth in its key)."""
    four = text.replace(b"ajs-", b"----")
    if text.lower() != text or four.count(b"-") != 4 * n:
        return None
    hyphen = np.frombuffer(four, dtype=np.uint8).reshape(n, 36) == ord("-")
    is_uuid = hyphen[:, 8] & hyphen[:, 13] & hyphen[:, 18] & hyphen[:, 23]
    is_ajs = hyphen[:, 0] & hyphen[:, 1] & hyphen[:, 2] & hyphen[:, 3]
    if not (is_uuid | is_ajs).all() or text.count(b"ajs-") != int(is_ajs.sum()):
        return None
    try:
        raw = unhexlify(four.replace(b"-", b""))  # lowercase: checked above
    except HexError:
        return None
    return _tagged_16(np.where(is_uuid, _UUID_BYTE, AJS), raw, n)


def _tagged_16(tags: int | np.ndarray, raw: bytes, n: int) -> list[bytes]:
    """``n`` 17-byte keys: each a tag byte (one for all, or one per key) and its 16 bytes of
    ``raw``."""
    disk = np.empty((n, 17), dtype=np.uint8)
    disk[:, 0] = tags
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


# Compact disk forms of message ids of the common non-canonical shapes.
#
# Each shape is a tag byte (0xF5-0xFC never occur in UTF-8, so no UTF-8 id starts with one) and
# the id's packed bytes; :func:`unpack` gives back the exact text. A text is packed only when it
# comes back byte for byte, so no two texts share a disk form:
#
# - ``0xFC``: ``ajs-`` and 32 lowercase hex digits (the classic analytics.js's message ids), 16
#   bytes;
# - ``0xF5``: ``ajs-next-<epoch ms>-<canonical UUID>``, the message id of analytics.js today
#   (segmentio/analytics-next, ``packages/browser/src/core/events/index.ts``:
#   ``createMessageId``), 59 characters: the time in 6 bytes (below 2**48 ms, the year 10889)
#   and the UUID's 16, 22 bytes;
# - ``0xFB``: an upper-case UUID with at least one letter (all-digit UUIDs are canonical), 16;
# - ``0xFA``/``0xF9``: a braced UUID, lowercase / upper case with a letter, 16 bytes;
# - ``0xF8``: a decimal number (no leading zero unless "0", at most 19 digits: below 2**64),
#   its minimal big-endian bytes;
# - ``0xF7``/``0xF6``: lowercase / upper-case (with a letter) hex of even length from 8 to 128
#   digits (a SHA-512 digest), its bytes. Shorter hex-looking text is more often a word or a
#   short code ("cafe", "a1") than a hex id, and packing it saves at most a byte. Decimal is
#   tried first, so digit-only hex that is a decimal number never reaches them.
AJS, UPPER_UUID, BRACED, BRACED_UPPER, DECIMAL, HEX, HEX_UPPER, AJS_NEXT = range(0xFC, 0xF4, -1)
#: Tag bytes this module uses.
TAGS = frozenset((AJS, UPPER_UUID, BRACED, BRACED_UPPER, DECIMAL, HEX, HEX_UPPER, AJS_NEXT))
_AJS_NEXT = b"ajs-next-"
#: ``ajs-next-`` ids: the shortest (a 1-digit time) and longest (15 digits: below 2**48).
_AJS_NEXT_LENGTHS = range(len(_AJS_NEXT) + 1 + 1 + 36, len(_AJS_NEXT) + 15 + 1 + 36 + 1)
MIN_HEX = 8
MAX_HEX = 128
_DIGITS = b"0123456789"
_UPPER = b"0123456789ABCDEF"
_LOWER = b"0123456789abcdef"


def _hex(text: bytes, alphabet: bytes) -> bytes | None:
    if text.translate(None, alphabet):
        return None
    try:
        return unhexlify(text)
    except HexError:
        return None


def _uuid(text: bytes, alphabet: bytes) -> bytes | None:
    if len(text) != 36 or text[8:24:5] != b"----" or text.count(b"-") != 4:
        return None
    return _hex(text.replace(b"-", b""), alphabet)


def _has_letter(text: bytes) -> bool:
    return bool(text.translate(None, _DIGITS + b"-{}"))


def _ajs_next(ms: bytes, uuid: bytes) -> bytes | None:
    if not ms.isdigit() or (ms[0] == 0x30 and len(ms) > 1):
        return None
    value = int(ms)
    raw = _uuid(uuid, _LOWER)
    if raw is None or value >= 1 << 48:
        return None
    return bytes((AJS_NEXT,)) + value.to_bytes(6, "big") + raw


def pack(key: bytes) -> bytes | None:
    """The id's compact form, or None when it has none of the shapes."""
    n = len(key)
    if n in _AJS_NEXT_LENGTHS and key[:9] == _AJS_NEXT and key[-37] == 0x2D:
        packed = _ajs_next(key[9:-37], key[-36:])
        if packed is not None:
            return packed
    if n == 36 and key[:4] == b"ajs-":
        raw = _hex(key[4:], _LOWER)
        if raw is not None:
            return bytes((AJS,)) + raw
    if n == 36 and _has_letter(key):
        raw = _uuid(key, _UPPER)
        if raw is not None:
            return bytes((UPPER_UUID,)) + raw
    if n == 38 and key[0] == 0x7B and key[37] == 0x7D:
        inner = key[1:37]
        raw = _uuid(inner, _LOWER)
        if raw is not None:
            return bytes((BRACED,)) + raw
        raw = _uuid(inner, _UPPER) if _has_letter(inner) else None
        if raw is not None:
            return bytes((BRACED_UPPER,)) + raw
    if 0 < n <= 19 and key.isdigit() and (n == 1 or key[0] != 0x30):
        value = int(key)
        return bytes((DECIMAL,)) + value.to_bytes(max(1, (value.bit_length() + 7) // 8), "big")
    if MIN_HEX <= n <= MAX_HEX and n % 2 == 0:
        raw = _hex(key, _LOWER)
        if raw is not None:
            return bytes((HEX,)) + raw
        raw = _hex(key, _UPPER) if _has_letter(key) else None
        return None if raw is None else bytes((HEX_UPPER,)) + raw
    return None


def uuid_text(raw: bytes) -> bytes:
    """The canonical lowercase text of a UUID's 16 bytes."""
    h = raw.hex().encode()
    return h[:8] + b"-" + h[8:12] + b"-" + h[12:16] + b"-" + h[16:20] + b"-" + h[20:]


def _unpack_any(tag: int, raw: bytes) -> bytes | None:
    if tag == AJS_NEXT and len(raw) == 22:
        ms = str(int.from_bytes(raw[:6], "big")).encode()
        return _AJS_NEXT + ms + b"-" + uuid_text(raw[6:])
    if tag == AJS and len(raw) == 16:
        return b"ajs-" + raw.hex().encode()
    if tag == UPPER_UUID and len(raw) == 16:
        return uuid_text(raw).upper()
    if tag == BRACED and len(raw) == 16:
        return b"{" + uuid_text(raw) + b"}"
    if tag == BRACED_UPPER and len(raw) == 16:
        return b"{" + uuid_text(raw).upper() + b"}"
    if tag == DECIMAL and 0 < len(raw) <= 8:
        return str(int.from_bytes(raw, "big")).encode()
    if tag == HEX and raw:
        return raw.hex().encode()
    if tag == HEX_UPPER and raw:
        return raw.hex().upper().encode()
    return None


def unpack(disk: bytes) -> bytes | None:
    """The text of a compact form, or None when ``disk`` is not one :func:`pack` writes (such a
    key is held as it is: it comes back unchanged)."""
    if not disk or disk[0] not in TAGS:
        return None
    text = _unpack_any(disk[0], disk[1:])
    # Only a form pack writes is decoded: every other byte string maps to itself.
    return text if text is not None and pack(text) == disk else None
