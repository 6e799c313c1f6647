"""Fixtures of the formats that outlive a worker (tables/formats.py): a data dir, a snapshot and a
changelog dump, in ``tests/fixtures/formats-v1/``, written by the code of data dir format 1,
snapshot format 2 and changelog format 1, and kept so that every later version is tested
against them (tests/unit/tables/test_format_fixtures.py,
tests/integration/test_changelog_fixture.py).

Regenerate them only when a format's version changes (then keep the old directory and add one
for the new version, so the previous format stays tested):

    .venv/bin/python -m tests.format_fixtures      # rewrites tests/fixtures/formats-v1/

What they hold is a pure function of this module (:func:`transactions`): 300 ids over 2
partitions, half of them canonical UUIDs (kept in 16 bytes on disk, ``tables/keys.py``) and half
plain text; 5 of them deleted again by a later transaction (tombstones, as the age-out writes
them); each transaction ends with its source-offsets record, the first one of partition 0 in
the form written before the record carried its version. The tests compare what the code reads
back with :func:`expected_entries` and :func:`expected_source_offsets`, computed here without
any of the code under test.

- ``changelog.jsonl``: one line per changelog record, ``{"partition", "txn", "key", "value",
  "headers"}`` (key and value base64, value null for a tombstone; ``txn`` numbers each
  partition's transactions), in the order the worker sends them;
- ``tables/``: the tables dir of a worker that committed those transactions (the store's live
  commit path, ``TransactionalStore.commit_partition``), flushed and closed;
- ``snapshot/``: ``python -m app snapshot``'s files of that data dir (``recovery/snapshot.py``).
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
import types
import uuid
from collections.abc import Iterator
from pathlib import Path

import faust

from app.settings import Settings
from recovery.snapshot import Identity, take
from tables.seen_ids.store import SeenIdsStore
from tables.source_offsets import SOURCE_OFFSETS_KEY, encode_source_offsets
from tables.window import Entry, block_size

ROOT = Path(__file__).resolve().parent / "fixtures" / "formats-v1"
IDENTITY = Identity("fixture-app", "fixture-events", 2)
TABLE = "seen_ids"
#: The age-out bucket the data dir was written with (its ids are counted per slot of it).
BUCKET_MS = 3_600_000
IDS = 300
PER_TRANSACTION = 50
FIRST_SEEN_MS = 1_764_288_000_000
#: Ids (by number) that a later transaction deletes again.
DELETED = (3, 10, 77, 150, 299)
#: A source-offsets record as workers wrote it before it carried the changelog version.
UNVERSIONED = b'{"fixture-events":100}'

Record = tuple[bytes, bytes | None]


def message_id(i: int) -> bytes:
    if i % 2 == 0:
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"fixture-{i}")).encode()
    return f"order-{i:04d}".encode()


def entry(i: int) -> Entry:
    # The sequence number counts the ids of its partition (partition_of), from 0.
    return Entry(FIRST_SEEN_MS + i * 60_000, (i // 4) * 2 + i % 2, repeats=i % 3)


def partition_of(i: int) -> int:
    return (i // 2) % IDENTITY.partitions


def transactions(partition: int) -> list[list[Record]]:
    """The changelog records of ``partition``, transaction by transaction."""
    numbers = [i for i in range(IDS) if partition_of(i) == partition]
    txns: list[list[Record]] = []
    for start in range(0, len(numbers), PER_TRANSACTION):
        chunk = numbers[start : start + PER_TRANSACTION]
        txns.append([(message_id(i), entry(i).encode()) for i in chunk])
    txns.append([(message_id(i), None) for i in DELETED if partition_of(i) == partition])
    consumed = 0
    for n, txn in enumerate(txns):
        consumed += len(txn) * 2  # each id record came of two input records (a first and a repeat)
        if partition == 0 and n == 0:
            assert json.loads(UNVERSIONED) == {IDENTITY.input_topic: consumed}
            txn.append((SOURCE_OFFSETS_KEY, UNVERSIONED))
        else:
            txn.append(
                (SOURCE_OFFSETS_KEY, encode_source_offsets({IDENTITY.input_topic: consumed}))
            )
    return txns


def expected_entries(partition: int) -> dict[bytes, Entry]:
    return {
        message_id(i): entry(i)
        for i in range(IDS)
        if partition_of(i) == partition and i not in DELETED
    }


def expected_source_offsets(partition: int) -> dict[str, int]:
    # Two input records per changelog record of the partition's ids, as transactions() counts.
    records = sum(1 for i in range(IDS) if partition_of(i) == partition)
    deleted = sum(1 for i in DELETED if partition_of(i) == partition)
    return {IDENTITY.input_topic: (records + deleted) * 2}


def new_store(tables_parent: Path) -> SeenIdsStore:
    """The worker's store of ``seen_ids`` on the tables dir ``tables_parent / "tables"``."""
    app = faust.App(IDENTITY.app_id, store="rocksdb://", datadir=str(tables_parent))
    app.conf.tabledir = tables_parent / "tables"
    return SeenIdsStore(
        "rocksdb://",
        app,
        types.SimpleNamespace(name=TABLE),
        partition_of=lambda: 0,
        bucket_ms=BUCKET_MS,
        block=block_size(Settings.from_env({}).max_ids_per_partition),
        table_name=TABLE,
        key_type=bytes,
        value_type=bytes,
        key_serializer="raw",
        value_serializer="raw",
    )


def dump_lines() -> Iterator[str]:
    for partition in range(IDENTITY.partitions):
        for n, txn in enumerate(transactions(partition)):
            for key, value in txn:
                yield json.dumps(
                    {
                        "partition": partition,
                        "txn": n,
                        "key": base64.b64encode(key).decode(),
                        "value": None if value is None else base64.b64encode(value).decode(),
                        "headers": [],
                    }
                )


def read_dump(path: Path) -> list[tuple[int, int, bytes, bytes | None]]:
    """``changelog.jsonl`` as (partition, txn, key, value)."""
    out = []
    for line in path.read_text().splitlines():
        raw = json.loads(line)
        value = None if raw["value"] is None else base64.b64decode(raw["value"])
        out.append((raw["partition"], raw["txn"], base64.b64decode(raw["key"]), value))
    return out


def write_data_dir(parent: Path) -> None:
    """Commit every transaction through the store's live path, as a worker does."""
    store = new_store(parent)
    for partition in range(IDENTITY.partitions):
        offset = 0
        for txn in transactions(partition):
            for key, value in txn:
                if key == SOURCE_OFFSETS_KEY:
                    assert value is not None
                    store.stage_source_offsets(partition, value)
                else:
                    store.stage(partition, key, value)
            offset += len(txn)
            store.commit_partition(partition, offset - 1)
            offset += 1  # the commit marker
        store.partition_db(partition).flush()
    for partition in range(IDENTITY.partitions):
        store.close_partition(partition)


def main() -> None:
    if ROOT.exists():
        shutil.rmtree(ROOT)
    ROOT.mkdir(parents=True)
    (ROOT / "changelog.jsonl").write_text("\n".join(dump_lines()) + "\n")
    with tempfile.TemporaryDirectory() as tmp:
        write_data_dir(Path(tmp))
        tables = Path(tmp) / "tables"
        take(tables, ROOT / "snapshot", IDENTITY, progress=print)
        # RocksDB's own info logs are not part of the format (it writes new ones on open).
        for log in tables.glob("*.db/LOG*"):
            log.unlink()
        shutil.copytree(tables, ROOT / "tables")
    size = sum(p.stat().st_size for p in ROOT.rglob("*") if p.is_file())
    print(f"wrote {ROOT} ({size:,} bytes)")


if __name__ == "__main__":
    main()
