"""An entry keeps the start of its sequence block, not its sequence number: blocks still fill up
across commits (the live worker counts on), a worker that reads the partition again (a restart,
a rebalance, a restore) begins the next block, and a rebuild from the changelog agrees."""

from __future__ import annotations

import types
from pathlib import Path

import pytest

from tests.unit.tables.seen_ids.support import World

#: A cap of 1,024 ids: blocks of 4 sequence numbers (``tables.window.block_size``).
CAP = "1024"


async def test_entries_keep_their_blocks_start_and_blocks_fill_across_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, monkeypatch, DEDUPE_MAX_IDS_PER_PARTITION=CAP)
    try:
        assert w.seen.block == 4
        for i in range(10):
            assert w.record(f"id-{i}", 1_000 + i)
            w.commit()  # one id per commit: a block per commit would give 0, 4, 8, ...
        held = w.ids()
        assert [held[f"id-{i}".encode()].seq for i in range(10)] == [0] * 4 + [4] * 4 + [8] * 2
        slot = w.slot(1_000)
        assert w.counts() == {(slot, 0): 4, (slot, 1): 4, (slot, 2): 2}
        # What a worker reading the partition starts from: the block after the newest held.
        assert w.store.summary(0).next_seq == 12
    finally:
        for store in w.stores:
            await store.on_stop()


async def test_a_worker_reading_the_partition_again_begins_the_next_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    w = World(tmp_path, monkeypatch, DEDUPE_MAX_IDS_PER_PARTITION=CAP)
    try:
        for i in range(5):  # block 0 full, block 4 holds one
            w.record(f"id-{i}", 1_000 + i)
        w.commit()
        w.store.close_partition(0)  # as a rebalance does: the decision reads the state again
        for i in range(5, 7):
            w.record(f"id-{i}", 1_000 + i)
        w.commit()
        held = w.ids()
        assert [held[f"id-{i}".encode()].seq for i in range(7)] == [0] * 4 + [4] + [8] * 2

        class Msg:
            def __init__(self, offset: int, key: bytes, value: bytes | None) -> None:
                self.partition, self.offset, self.key, self.value = 0, offset, key, value

        replica = w.new_store("seen_ids_replica")
        replica.apply_changelog_batch(
            [
                types.SimpleNamespace(message=Msg(n, k, v))  # type: ignore[misc]
                for n, (_, k, v) in enumerate(w.table.changelog)
            ],
            None,
            None,
        )
        assert w.ids(replica) == held
        assert w.counts(replica) == w.counts()
        assert replica.summary(0).next_seq == w.store.summary(0).next_seq == 12
    finally:
        for store in w.stores:
            await store.on_stop()
