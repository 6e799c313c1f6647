"""The source-offsets record: each transaction's own account of where its input stands.

Every transaction adds one record to each changelog partition it writes, under
:data:`SOURCE_OFFSETS_KEY`, whose value is the next offset to read of each source topic (JSON,
topic -> offset). It is committed with the output and the group's offsets, so a store that
holds it knows where its state stands against the input even where the group's committed
offsets read back stale. This module is the record's one home: its key, its form, and the
bookkeeping key that says a live commit (not a restore) applied it.

The record also carries the changelog's format version (:data:`tables.formats.CHANGELOG_FIELD`,
once per transaction): every write of a record, live or restored, checks it first, so a store
never applies the record of a transaction in a changelog format this worker does not read (it
raises :class:`tables.formats.FormatRefused`, and the worker stops: ``recovery/bulk.py``,
``recovery/follow.py`` and ``recovery/faust_adapter.py`` let it through). A record without the
field is version 1 (written before the field existed); workers of that time look up only their
source topics in it, so they read records with the field too (a rollback to them is safe).
"""

from __future__ import annotations

import json
from typing import Any

from rocksdict import Rdict, WriteBatch

from tables.formats import CHANGELOG, CHANGELOG_FIELD, FormatRefused
from tables.key_prefixes import RESERVED_TAG

#: Changelog key of the record. Its first byte (:data:`tables.key_prefixes.RESERVED_TAG`) never
#: occurs in UTF-8, so no messageId can be this key. The store keeps its value in its bookkeeping
#: column family (``tables.rocks.META_CF``), not among the ids.
SOURCE_OFFSETS_KEY = RESERVED_TAG + b"dedupe:source-offsets"
#: Key (in :data:`META_CF`) of the changelog offset of the source-offsets record a live commit
#: applied (8 bytes): that transaction's commit is still to be confirmed in the changelog when
#: the store's source offsets are ever used to raise a start (``app/eos/positions.py``). Absent
#: when the record was restored from the changelog (read committed, so confirmed).
SOURCE_OFFSETS_AT_KEY = b"source-offsets-at"


def encode_source_offsets(offsets: dict[str, int]) -> bytes:
    record = {**offsets, CHANGELOG_FIELD: CHANGELOG.current}
    return json.dumps(record, sort_keys=True, separators=(",", ":")).encode()


def changelog_version(raw: bytes) -> int:
    """The changelog format of a source-offsets record's value (1: without the field)."""
    return int(json.loads(raw).get(CHANGELOG_FIELD, 1))


def decode_source_offsets(raw: bytes) -> dict[str, int]:
    """Topic -> next offset (the version field is not a topic)."""
    return {str(k): int(v) for k, v in json.loads(raw).items() if k != CHANGELOG_FIELD}


def check_changelog_version(raw: bytes, where: str) -> None:
    """Raise :class:`tables.formats.FormatRefused` unless this worker reads the changelog format
    of the source-offsets record ``raw`` (from ``where``)."""
    try:
        found = changelog_version(raw)
    except (ValueError, TypeError, AttributeError) as exc:
        raise FormatRefused(
            f"{where}: a source-offsets record that is unreadable ({exc!r})"
        ) from exc
    CHANGELOG.check(found, where)


def put_source_offsets(batch: WriteBatch, meta: Any, value: bytes, at: int | None) -> None:
    """Into ``batch``: the record's ``value`` in the bookkeeping column family (handle ``meta``),
    and ``at``, the changelog offset of the record a live commit applied (None: restored from the
    changelog, so committed: any older ``at`` goes)."""
    batch.put(SOURCE_OFFSETS_KEY, value, meta)
    if at is None:
        batch.delete(SOURCE_OFFSETS_AT_KEY, meta)
    else:
        batch.put(SOURCE_OFFSETS_AT_KEY, at.to_bytes(8, "big"), meta)


def read_source_offsets(meta: Rdict) -> dict[str, int]:
    """Topic -> next offset, from the bookkeeping column family ``meta`` ({}: none recorded)."""
    raw = meta.get(SOURCE_OFFSETS_KEY)
    return {} if raw is None else decode_source_offsets(raw)


def read_source_offsets_at(meta: Rdict) -> int | None:
    """The changelog offset of the record, when a live commit applied it."""
    raw = meta.get(SOURCE_OFFSETS_AT_KEY)
    return None if raw is None else int.from_bytes(raw, "big")
