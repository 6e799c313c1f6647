"""Converting a partition's database from key form 1 to form 2 in place (``tables/keys.py``).

Form 2 packs more id shapes than form 1 (``tables/key_shapes.py``). Every key form 1 packs (the
canonical UUIDs) is the same in form 2, and every other key of form 1 is its text, so a database
of form 1 becomes one of form 2 by rewriting the keys whose text form 2 packs: in the ids, and
in the values of the age-out index (which name an id by its disk key). That is one pass over
the database on local disk, where a rebuild from the changelog would make the first start after
a rolling upgrade a cold start of every worker. Kafka Streams also converts a store's layout on
local disk rather than from its changelog (``streams/.../state/internals/
RocksDBTimestampedStore.java``: a store holding the old layout opens "in upgrade mode"); it
converts each key when it is next read, this converts all of them on open, so no lookup ever
has to try two forms.

A conversion stopped midway is safe to repeat: each chunk's rewrites are one atomic write batch,
a key already in form 2 maps to itself, and the database is marked form 2 only after its last
chunk, so the next open converts what is left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import cast

from rocksdict import Rdict, WriteBatch

from tables import keys as key_forms
from tables.key_prefixes import SCOPED_TAG
from tables.rocks import PartitionDB

log = logging.getLogger(__name__)

#: The key forms a database may be in to be converted to :data:`tables.keys.FORMAT`.
CONVERTS_FROM = frozenset({1})
#: Rewrites per write batch.
CHUNK = 20_000
#: A log line per this many keys read, for a large database.
PROGRESS_EVERY = 1_000_000


#: First bytes of keys both forms write alike. No id's text starts with one (UTF-8 never holds
#: 0xF5-0xFF), so such a key is a packed UUID or a reserved key, the same in both forms, or one
#: this conversion already wrote before it was cut short. A source-scoped key's id follows its
#: prefix, so that one is converted. Most keys are UUIDs, which then skip a decode and an encode.
KEPT_FIRST_BYTES = frozenset(range(0xF5, 0x100)) - {SCOPED_TAG[0]}


def in_form_2(raw: bytes) -> bytes:
    """``raw``, a key of form 1 (or of form 2, written by a cut-short conversion), in form 2."""
    if raw and raw[0] in KEPT_FIRST_BYTES:
        return raw
    return key_forms.to_disk(key_forms.from_disk(raw))


def convert(pdb: PartitionDB, found: int, index_cf: str, name: str) -> int | None:
    """Convert ``pdb`` (keys in form ``found``) to this version's form and mark it so; the
    number of keys and index entries rewritten, or None when ``found`` cannot be converted
    (the caller rebuilds the database from the changelog then). ``name``: for the log."""
    if found not in CONVERTS_FROM:
        return None
    index = pdb.extra[index_cf]
    handle = pdb.handles[index_cf]

    def rewrite_id(batch: WriteBatch, raw: bytes, value: bytes) -> bool:
        new = in_form_2(raw)
        if new == raw:
            return False
        batch.delete(raw)
        batch.put(new, value)
        return True

    def rewrite_index(batch: WriteBatch, index_key: bytes, disk_key: bytes) -> bool:
        new = in_form_2(disk_key)
        if new == disk_key:
            return False
        batch.put(index_key, new, handle)
        return True

    rewritten = _each_chunk(pdb, pdb.db, rewrite_id, f"{name}: ids")
    rewritten += _each_chunk(pdb, index, rewrite_index, f"{name}: age-out index")
    # An empty write stores this version's key form (PartitionDB.write): only now, after the
    # last rewrite, so a conversion cut short is repeated on the next open.
    pdb.write(WriteBatch(raw_mode=True), None)
    return rewritten


def _each_chunk(
    pdb: PartitionDB,
    family: Rdict,
    rewrite: Callable[[WriteBatch, bytes, bytes], bool],
    what: str,
) -> int:
    # The iterator reads a consistent view of the database as it was when it started, so the
    # keys written behind it are not read again.
    rewritten = pending = 0
    batch = WriteBatch(raw_mode=True)
    items = cast(Iterable[tuple[bytes, bytes]], family.items())
    for read, (key, value) in enumerate(items, 1):
        if rewrite(batch, key, value):
            pending += 1
        if pending >= CHUNK:
            pdb.db.write(batch)
            rewritten += pending
            pending = 0
            batch = WriteBatch(raw_mode=True)
        if read % PROGRESS_EVERY == 0:
            log.info("%s: %d read, %d rewritten so far", what, read, rewritten + pending)
    if pending:
        pdb.db.write(batch)
        rewritten += pending
    return rewritten
