"""Evidence that stock faust-streaming's exactly_once processing guarantee is not exactly-once.

Each test runs the textbook dedup app of :mod:`stock_app` (faust-streaming 0.15.3 and aiokafka 0.14
as installed, none of our code) as a subprocess on the real Kafka broker, crashes it where it
needs to, and asserts that a defect of /work/shared/FAUST-EOS.md IS present:

- D0 output records are not in the transaction (visible before any commit, duplicated after a
  crash);
- D1 a changelog record slips into the next transaction while its event's offset is committed;
- D2 the RocksDB store's persisted changelog offset is never written while processing, so every
  restart replays the changelog from the start / from the last recovery;
- D3 local state keeps ids from aborted transactions: after a crash the replayed event is dropped
  as a duplicate and never reaches the output;
- D4 a failed (fenced) commit is logged and reported as a success.

These tests document stock behaviour, so they PASS while the defects exist. If a future Faust
fixes one, its test fails: then re-check docs/design.md's claims and our replacements.

The apps print ``STOCK-...`` lines from optional hooks that observe Faust or pin the moment of a
crash (see :mod:`stock_app`); they do not change what Faust does.

D1 and D2 (the changelog) are in test_stock_faust_changelog.py.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter

import pytest

from tests.integration.stock_faust.evidence import MakeWorker, ids, keys_of
from tests.integration.stock_faust.harness import (
    OFFSET_KEY,
    StockNames,
    StockWorker,
    ends_of,
    group_offsets,
    init_producer_ids,
    produce,
    read_store,
    run,
    transactional_ids,
    wait_drained,
    wait_until,
)
from tests.support import Broker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def store_keys(worker: StockWorker) -> set[bytes]:
    """Ids in the worker's local RocksDB table, every partition (the worker must be stopped)."""
    keys: set[bytes] = set()
    for partition in range(worker.partitions):
        keys |= set(read_store(worker.data_dir, "seen", partition)) - {OFFSET_KEY}
    return keys


def test_d0_output_is_outside_the_transaction_and_duplicated_after_a_crash(
    broker: Broker, stock_names: StockNames, stock_worker: MakeWorker
) -> None:
    """Before its first commit the worker's output is already visible to a read_committed
    reader, while the changelog records written by the very same processing are not (they sit in
    the open transaction). A crash then aborts the transaction, but not the output: another
    worker (fresh disk, state recovered from the changelog) sends every id again."""
    b, n = broker.bootstrap, stock_names
    sent = ids("d0", 200)
    ends = ends_of(run(produce(b, n.input_topic, sent)))

    first = stock_worker("a", STOCK_COMMIT_INTERVAL="30")
    first.start_ready()
    wait_until(lambda: len(keys_of(b, n.output_topic)) >= len(sent), 45, "output of run 1")
    wait_until(
        lambda: len(keys_of(b, n.changelog_topic, "read_uncommitted")) >= len(sent),
        15,
        "changelog records of run 1",
    )
    visible_output = keys_of(b, n.output_topic)
    committed = run(group_offsets(b, n.app_id, n.input_topic))
    changelog_committed = keys_of(b, n.changelog_topic)
    changelog_uncommitted = keys_of(b, n.changelog_topic, "read_uncommitted")
    assert first.alive()
    first.kill()
    print(
        f"\nD0 before the first commit: {len(visible_output)} output records visible "
        f"read_committed, group offsets {committed}; changelog {len(changelog_committed)} "
        f"read_committed / {len(changelog_uncommitted)} read_uncommitted"
    )
    assert committed == {}, "nothing may be committed yet (commit interval 30 s)"
    assert sorted(visible_output) == sorted(sent)
    assert changelog_committed == []
    assert sorted(changelog_uncommitted) == sorted(sent)

    # Another worker takes the partitions over (its disk is empty: state comes from the
    # changelog, where the crashed transaction was aborted) and processes the input again.
    second = stock_worker("b", STOCK_COMMIT_INTERVAL="0.5")
    second.start_ready()
    wait_drained(second, ends, timeout=60)
    counts = Counter(keys_of(b, n.output_topic))
    print(f"D0 after restart: {sum(counts.values())} output records for {len(counts)} ids")
    assert set(counts) == set(sent)
    assert set(counts.values()) == {2}, "every id must come out twice"


def test_d3_local_state_keeps_ids_of_an_aborted_transaction_and_loses_the_event(
    broker: Broker, stock_names: StockNames, stock_worker: MakeWorker
) -> None:
    """The worker dies after ``seen[id] = 1`` and before the send of that id. Its transaction
    never commits (no offset, no changelog record), yet RocksDB keeps the id: restarted on the
    same disk, the worker drops the replayed event as a duplicate, so the id never reaches the
    output. Exactly-once requires it once."""
    b, n = broker.bootstrap, stock_names
    sent = ids("d3", 200)
    stall = sent[100]
    ends = ends_of(run(produce(b, n.input_topic, sent)))

    worker = stock_worker("a", STOCK_COMMIT_INTERVAL="30", STOCK_STALL_KEY=stall.decode())
    worker.start_ready()
    worker.wait_for_log("STOCK-STALLED", 45)

    def settled() -> list[bytes] | None:
        before = keys_of(b, n.output_topic)
        time.sleep(1.0)
        after = keys_of(b, n.output_topic)
        return after if after == before else None

    output_before_kill = set(wait_until(settled, 20, "output to settle", interval=0))
    assert run(group_offsets(b, n.app_id, n.input_topic)) == {}
    worker.kill()

    in_store = store_keys(worker)
    print(
        f"\nD3 killed before any commit: {len(in_store)} ids in RocksDB, "
        f"{len(output_before_kill)} in the output, stalled id {stall.decode()} in the store "
        f"but not the output"
    )
    assert stall in in_store
    assert stall not in output_before_kill
    assert in_store == output_before_kill | {stall}

    worker.start_ready(STOCK_COMMIT_INTERVAL="0.5", STOCK_STALL_KEY="")  # same data dir
    wait_drained(worker, ends, timeout=60)
    counts = Counter(keys_of(b, n.output_topic))
    changelog = set(keys_of(b, n.changelog_topic))
    print(
        f"D3 after restart on the same disk: {sum(counts.values())} output records for "
        f"{len(counts)} of {len(sent)} ids; committed changelog holds "
        f"{len(changelog & in_store)} of the {len(in_store)} ids run 1 left in RocksDB"
    )
    assert stall not in counts, "the stalled id is lost"
    assert set(counts) == set(sent) - {stall}
    assert set(counts.values()) == {1}
    # the local state disagrees with the committed changelog it is supposed to mirror
    assert changelog.isdisjoint(in_store)
    assert changelog == set(sent) - in_store


def test_d4_fenced_commit_is_logged_and_reported_as_success(
    broker: Broker, stock_names: StockNames, stock_worker: MakeWorker
) -> None:
    """Another producer takes over the worker's transactional ids (what a zombie's successor
    does). The worker's next commit fails with ProducerFenced; Faust logs it and
    ``TransactionManager.commit`` still returns True, though Kafka holds no committed offset.
    (The app does crash a moment later, so here the false success only reaches Faust's own
    bookkeeping: ``_committed_offset`` and ``tables.on_commit``.)"""
    b, n = broker.bootstrap, stock_names
    sent = ids("d4", 200)
    run(produce(b, n.input_topic, sent))
    worker = stock_worker("a", STOCK_COMMIT_INTERVAL="8", STOCK_LOG_COMMITS="1")
    worker.start_ready()
    wait_until(lambda: len(keys_of(b, n.output_topic)) >= len(sent), 45, "output")
    assert "STOCK-COMMIT" not in worker.log_text(), "the fence must come before the first commit"
    run(init_producer_ids(b, transactional_ids(worker.log_text())))
    worker.wait_for_log("STOCK-COMMIT", 30)
    time.sleep(1.0)  # let the log and the broker settle

    line = re.search(r"STOCK-COMMIT (\{.*?\}) returned (\w+)", worker.log_text())
    assert line is not None
    reported = {int(p): o for p, o in json.loads(line.group(1)).items()}
    committed = run(group_offsets(b, n.app_id, n.input_topic))
    log = worker.log_text()
    print(
        f"\nD4 fenced commit of {reported} returned {line.group(2)}; Kafka has {committed} "
        f"committed; worker alive={worker.alive()} exit={worker.proc and worker.proc.poll()}"
    )
    assert re.search(r"\[WARNING\] ProducerFenced", log)
    assert line.group(2) == "True"
    assert sum(reported.values()) == len(sent)
    assert all(committed.get(p, 0) < off for p, off in reported.items())
