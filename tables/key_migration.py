"""Converting a partition's database of an earlier layout to this one in place (``tables/keys.py``).

Form 3 is form 2 without the age-out index, a column family that named every id a second time
(the counts of ``tables/slot_counts.py`` took its place): a database of form 2 becomes one of
form 3 by dropping that family. Form 2 packs more id shapes than form 1
(``tables/keys.py``). Every key form 1 packs (the canonical UUIDs) is the same in form 2,
and every other key of form 1 is its text, so a database of form 1 also has the keys whose text
form 2 packs rewritten. That is one pass over the database on local disk at most, where a
rebuild from the changelog would make the first start after a rolling upgrade a cold start of
every worker. Kafka Streams also converts a store's layout on
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
CONVERTS_FROM = frozenset({1, 2})
#: The column family of the age-out index of forms 1 and 2.
LEGACY_INDEX_CF = "dedupe-age-index"
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


def convert(pdb: PartitionDB, found: int, name: str) -> int | None:
    """Convert ``pdb`` (keys in form ``found``) to this version's form and mark it so; the
    number of keys rewritten, or None when ``found`` cannot be converted (the caller rebuilds
    the database from the changelog then). ``name``: for the log. The caller counts the ids
    again (the index held what the counts now say)."""
    if found not in CONVERTS_FROM:
        return None

    def rewrite_id(batch: WriteBatch, raw: bytes, value: bytes) -> bool:
        new = in_form_2(raw)
        if new == raw:
            return False
        batch.delete(raw)
        batch.put(new, value)
        return True

    rewritten = _each_chunk(pdb, pdb.db, rewrite_id, f"{name}: ids") if found == 1 else 0
    if LEGACY_INDEX_CF in Rdict.list_cf(pdb.db.path()):
        pdb.db.drop_column_family(LEGACY_INDEX_CF)
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
