"""The first bytes that set the table's special keys apart from plain message ids: their one home.

0xFD, 0xFE and 0xFF never occur in UTF-8, and message ids are UTF-8, so a key that starts with
one of them is never a plain message id. ``tables/keys.py`` gives UUIDs their 16-byte disk form
with :data:`UUID_TAG`; ``app/strategy.py`` builds source-scoped and fingerprint keys;
``tables/source_offsets.py`` names its record. (No imports: the ingest side and the strategy
rules read these without loading the store's dependencies.)
"""

from __future__ import annotations

#: First byte of a UUID in its 16-byte form (``tables/keys.py``).
UUID_TAG = b"\xfd"
#: First byte of a source-scoped key (``app/strategy.py``): the source's length and name follow.
SCOPED_TAG = b"\xfe"
#: First byte of the reserved keys: a payload fingerprint's (``app/strategy.py``, 17 bytes) and
#: the store's source-offsets record's (``tables/source_offsets.py``, a longer fixed name).
RESERVED_TAG = b"\xff"
