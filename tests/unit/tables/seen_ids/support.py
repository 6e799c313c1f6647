"""Shared by the tests of ``tables.seen_ids`` on a real RocksDB store
(tests/unit/tables/seen_ids/): the window's figures, a table straight on the store, and the
world of one store and its changelog."""

from __future__ import annotations

import types
from pathlib import Path

import faust
import pytest

from app.settings import Settings
from tables import window
from tables.seen_ids import SeenIds
from tables.seen_ids.store import SeenIdsStore
from tables.seen_ids.summary import stored_counts

BUCKET_MS = 1_000

WINDOW_MS = 10_000


class StoreTable:
    """What SeenIds needs of its table, over a real store; records the changelog it would send."""

    def __init__(self, store: SeenIdsStore) -> None:
        self.data = store
        self.changelog: list[tuple[int, bytes, bytes | None]] = []
        self.partition = 0

    def lookup(self, key: bytes, partition: int | None = None) -> bytes | None:
        return self.data.get_in(self.partition if partition is None else partition, key)

    def put(self, key: bytes, value: bytes | None, partition: int | None = None) -> None:
        p = self.partition if partition is None else partition
        self.data.stage(p, key, value)
        self.changelog.append((p, key, value))

    def __setitem__(self, key: bytes, value: bytes) -> None:
        self.put(key, value)

    def __delitem__(self, key: bytes) -> None:
        self.put(key, None)


class World:
    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **env: str) -> None:
        self.app = faust.App("t-seen", store="rocksdb://", datadir=str(tmp_path))
        self.tmp_path = tmp_path
        self.stores: list[SeenIdsStore] = []
        self.settings = Settings.from_env(
            {
                "DEDUPE_WINDOW": f"{WINDOW_MS}ms",
                "DEDUPE_BUCKET": f"{BUCKET_MS}ms",
                "DEDUPE_ALLOWED_LATENESS": "0",
                "DEDUPE_MIN_WINDOW": "0",
                **env,
            }
        )
        self.store = self.new_store("seen_ids")
        self.table = StoreTable(self.store)
        self.seen = SeenIds(self.table, self.settings)  # type: ignore[arg-type]
        self.offset = 0

    def new_store(self, name: str) -> SeenIdsStore:
        store = SeenIdsStore(
            "rocksdb://",
            self.app,
            types.SimpleNamespace(name=name),
            partition_of=lambda: self.table.partition,
            bucket_ms=BUCKET_MS,
            block=window.block_size(self.settings.max_ids_per_partition),
            table_name=name,
            key_type=bytes,
            value_type=bytes,
            key_serializer="raw",
            value_serializer="raw",
        )
        self.stores.append(store)
        return store

    def first(self, id_bytes: bytes, t: int) -> bool:
        """Decide one record of the current partition: True for a first sighting."""
        return self.seen.decide(id_bytes, t, self.table.partition) is window.Verdict.FIRST

    def age_out(self, t: int) -> int:
        return self.seen.age_out(t, self.table.partition)

    def record(self, id_: str, t: int) -> bool:
        """Process one record (decide + age out) like the agent does."""
        first = self.first(id_.encode(), t)
        self.age_out(t)
        return first

    def commit(self) -> None:
        p = self.table.partition
        self.offset += 1
        self.store.commit_partition(p, self.offset)
        self.seen.commit_partition(p, self.offset)

    def ids(
        self, store: SeenIdsStore | None = None, partition: int = 0
    ) -> dict[bytes, window.Entry]:
        s = store or self.store
        return {s.written_key(k): window.Entry.decode(v) for k, v in s.db(partition).items()}

    def counts(
        self, store: SeenIdsStore | None = None, partition: int = 0
    ) -> dict[tuple[int, int], int]:
        """The committed ids per rank, as stored (read back from the database), which must be
        what the store keeps in memory."""
        s = store or self.store
        in_memory = s.counts(partition).counts  # first: it may count the ids (and store them)
        stored = {rank: n for _, rank, n in stored_counts(s.partition_db(partition))}
        assert stored == in_memory
        return stored

    def rank(self, first_seen_ms: int, seq: int) -> tuple[int, int]:
        return self.slot(first_seen_ms), seq // self.seen.block

    def slot(self, first_seen_ms: int) -> int:
        return first_seen_ms - first_seen_ms % window.slot_width(BUCKET_MS)
