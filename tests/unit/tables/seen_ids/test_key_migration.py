"""A database of key form 1 (only canonical UUIDs packed) or 2 (the keys of this version, and the
age-out index that named every id a second time) is converted to this version's form in place
when a store opens it (tables/key_migration.py), on real RocksDB: every id is found by the
worker's own lookups with its entry, the index is dropped, the ids are counted per slot, and
the summary, the changelog offset and the source offsets are kept; a conversion cut short is
finished by the next open."""

from __future__ import annotations

import logging
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rocksdict import Options, Rdict, WriteBatch

from tables import key_migration, keys
from tables.key_prefixes import SCOPED_TAG, UUID_TAG
from tables.rocks import KEY_FORMAT_KEY
from tables.seen_ids.store import SeenIdsStore
from tables.seen_ids.summary import SUMMARY_KEY, stored_counts
from tables.source_offsets import encode_source_offsets
from tables.window import Entry, bucket_start
from tests.unit.tables.seen_ids.support import World


def scoped(source: bytes, message_id: bytes) -> bytes:
    return SCOPED_TAG + bytes((len(source),)) + source + message_id


def plain_ids() -> list[bytes]:
    """One of each shape: those form 1 packed, those it kept as text."""
    return [
        str(uuid.uuid4()).encode(),  # packed by both forms
        b"ajs-" + uuid.uuid4().hex.encode(),
        b"ajs-next-1764288000000-" + str(uuid.uuid4()).encode(),
        str(uuid.uuid4()).upper().encode(),
        b"{" + str(uuid.uuid4()).encode() + b"}",
        b"{" + str(uuid.uuid4()).upper().encode() + b"}",
        b"1234567890123",
        uuid.uuid4().hex.encode() * 2,
        b"order-0042",  # no compact shape in either form
        "commande-été-7".encode(),
    ]


def ids() -> list[bytes]:
    """One of each shape, plain and scoped."""
    plain = plain_ids()
    return plain + [scoped(b"ios", m) for m in plain]


def form_1(key: bytes) -> bytes:
    """Form 1's disk form, computed without tables/keys.py: a canonical lowercase UUID (plain
    or after a scoped key's prefix) as its tag and 16 bytes, every other key as written."""
    start = 2 + key[1] if key[:1] == SCOPED_TAG else 0
    text = key[start:].decode()
    try:
        canonical = str(uuid.UUID(text)) == text
    except ValueError:
        canonical = False
    return key[:start] + UUID_TAG + uuid.UUID(text).bytes if canonical else key


def write_as_old_layout(store: SeenIdsStore, form: int = 1, left_in_form_2: int = 0) -> int:
    """Rewrite partition 0 as a worker of key form ``form`` left it: keys of form 1 (but the
    first ``left_in_form_2`` ids, in key order, of those whose forms differ, kept as this
    version wrote them: a conversion that stopped there), the age-out index (bucket of the
    first sighting and sequence -> the id's disk key), that layout's summary and no counts; how
    many ids differ between forms 1 and 2."""
    pdb = store.partition_db(0)
    batch = WriteBatch(raw_mode=True)
    differ = 0
    index = pdb.db.create_column_family(key_migration.LEGACY_INDEX_CF, Options(raw_mode=True))
    handle = pdb.db.get_column_family_handle(key_migration.LEGACY_INDEX_CF)
    for raw, value in list(pdb.db.items()):
        old = form_1(store.written_key(raw)) if form == 1 else raw
        if old != raw:
            differ += 1
            if differ > left_in_form_2:
                batch.delete(raw)
                batch.put(old, value)
        entry = Entry.decode(value)
        index_key = bucket_start(entry.first_seen_ms, store.bucket_ms).to_bytes(8, "big")
        batch.put(index_key + entry.seq.to_bytes(8, "big"), old, handle)
    for key, _, _ in stored_counts(pdb):
        batch.delete(key, pdb.meta_handle)
    summary = pdb.meta[SUMMARY_KEY]
    # Held, next sequence and newest first sighting, then the hint (empty: from the start).
    batch.put(SUMMARY_KEY, summary[:24], pdb.meta_handle)
    batch.put(KEY_FORMAT_KEY, bytes((form,)), pdb.meta_handle)
    pdb.db.write(batch)
    del index
    return differ


def stored(world: World, store: SeenIdsStore) -> tuple[dict[bytes, Entry], dict[int, int]]:
    return world.ids(store), world.counts(store)


@pytest.mark.parametrize(
    ("form", "left_in_form_2"), [(1, 0), (1, 3), (2, 0)], ids=["form-1", "cut-short", "form-2"]
)
def test_a_database_of_an_earlier_form_is_converted_in_place(
    world: World, caplog: pytest.LogCaptureFixture, form: int, left_in_form_2: int
) -> None:
    every = ids()
    for n, key in enumerate(every):
        assert world.first(key, 1_000 + n)
    world.store.stage_source_offsets(0, encode_source_offsets({"in": 40}))
    world.commit()
    before, summary = stored(world, world.store), world.store.summary(0)
    differ = write_as_old_layout(world.store, form, left_in_form_2)
    # Every shape form 2 packs beyond form 1: 7 of the 10, plain and scoped.
    assert differ == (14 if form == 1 else 0)
    assert world.store.partition_db(0).stored_key_format() == form
    path = world.store.partition_path(0)
    world.store.close_partition(0)

    with caplog.at_level(logging.WARNING):
        reopened = world.new_store("seen_ids")
        pdb = reopened.partition_db(0)
    rewritten = differ - left_in_form_2  # ids not yet converted
    assert (
        f"held keys in disk form {form}, this worker's is {keys.FORMAT}; converted in place "
        f"({rewritten} keys rewritten)" in caplog.text
    )
    assert pdb.stored_key_format() == keys.FORMAT
    assert key_migration.LEGACY_INDEX_CF not in Rdict.list_cf(str(path))
    assert stored(world, reopened) == before
    assert reopened.summary(0) == summary
    # The worker's own lookups find every id (in the form this version packs it).
    for key in every:
        value = reopened.committed_get(0, key)
        assert value is not None and Entry.decode(value) == before[0][key]
    assert {raw for raw, _ in pdb.db.items()} == {keys.to_disk(k) for k in every}
    assert reopened.source_offsets(0) == {"in": 40}


def test_a_converted_database_is_not_converted_again(
    world: World, caplog: pytest.LogCaptureFixture
) -> None:
    assert world.first(b"ajs-" + uuid.uuid4().hex.encode(), 1_000)
    world.commit()
    write_as_old_layout(world.store)
    world.store.close_partition(0)
    first_open = world.new_store("seen_ids")
    first_open.partition_db(0)
    first_open.close_partition(0)
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        world.new_store("seen_ids").partition_db(0)
    assert "disk form" not in caplog.text


_TEXTS = st.one_of(
    st.text(min_size=1), st.uuids().map(str), st.sampled_from(plain_ids()).map(bytes.decode)
)
_KEYS = st.one_of(
    _TEXTS.map(str.encode),
    st.builds(scoped, st.sampled_from([b"ios", b"web"]), _TEXTS.map(str.encode)),
)


@settings(max_examples=300, deadline=None)
@given(_KEYS)
def test_keys_the_conversion_leaves_alone_are_the_same_in_both_forms(key: bytes) -> None:
    """The conversion's shortcut (key_migration.KEPT_FIRST_BYTES) is sound: no key of an id
    starts with one of those bytes as written, and each key either form may hold, form 1's and
    this version's, comes out of the conversion as decoding and encoding it again would."""
    assert key[0] not in key_migration.KEPT_FIRST_BYTES
    for held in (form_1(key), keys.to_disk(key)):
        assert key_migration.in_form_2(held) == keys.to_disk(keys.from_disk(held))
    assert key_migration.in_form_2(keys.to_disk(key)) == keys.to_disk(key)
