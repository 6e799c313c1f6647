"""F23: ``DEDUPE_WINDOW_FROM=last_seen`` through kill -9 and a rebuild from the changelog.

Every id repeats every ~2 s for a minute, three times the 20 s window: only re-arming keeps each
one a single event (under ``first_seen`` each would be forwarded about three times, and the
verifier would count them as duplicates). The worker is killed with SIGKILL twice while the
stream flows, the second time restarted on a wiped data dir, so it rebuilds every partition from
the changelog, re-armed entries and moved counts included. At the end the state must hold
every id with the time of its last copy in the input (the age the input says it has), as the
survivor held it before a last wiped rebuild, and the clean topic each event once."""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import signal
import time
from pathlib import Path

import pytest
from rocksdict import AccessType, Options, Rdict

from scripts.streams import OutRecord, Stream
from scripts.topic_reader import read_topic
from scripts.verify import verify_pipeline
from tables.keys import from_disk
from tables.rocks import META_CF
from tables.seen_ids.summary import RANK_PREFIX
from tables.window import Entry
from tests.faults.conftest import SCALE, Reliability
from tests.faults.scenario import Feeder, record, settings_of
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.faults

ENV = {"DEDUPE_WINDOW": "20s", "DEDUPE_WINDOW_FROM": "last_seen"}
ROUNDS, SECONDS = 30, 60.0  # a copy of every id per round: one every ~2 s


def heartbeat_stream(ids: int) -> Stream:
    rng = random.Random(23)
    unique: dict[str, bytes] = {}
    for i in range(ids):
        mid = f"hb-{i:05d}-{rng.getrandbits(32):08x}"
        unique[mid] = json.dumps({"type": "track", "event": "Heartbeat", "messageId": mid}).encode()
    records = []
    for _ in range(ROUNDS):
        order = list(unique)
        rng.shuffle(order)
        records.extend(OutRecord(m, m.encode(), unique[m], ()) for m in order)
    return Stream(records, unique)


def held_state(data_dir: Path) -> tuple[dict[bytes, int], int]:
    """(id -> armed time, ids counted) over every partition's database, read-only."""
    ids: dict[bytes, int] = {}
    counted = 0
    for path in sorted(data_dir.rglob("seen_ids-*.db")):
        opts = Options(raw_mode=True)
        db = Rdict(
            str(path),
            opts,
            column_families={META_CF: opts},
            access_type=AccessType.read_only(),
        )
        meta = db.get_column_family(META_CF)
        try:
            for key, value in db.items():  # the ids (bookkeeping lives in META_CF)
                ids[from_disk(key)] = Entry.decode(value).first_seen_ms
            counted += sum(
                int.from_bytes(v, "big")
                for k, v in meta.items(from_key=RANK_PREFIX)
                if k.startswith(RANK_PREFIX)
            )
        finally:
            meta.close()
            db.close()
    return ids, counted


def test_last_seen_through_kill_9_and_a_rebuild_from_the_changelog(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    stream = heartbeat_stream(300 * SCALE)
    worker = Worker(broker, names, extra_env=ENV)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    feeder = Feeder(broker, names, stream, seconds=SECONDS)
    for wipe in (False, True):
        time.sleep(SECONDS / 3)
        feeder.assert_flowing()
        worker.kill(signal.SIGKILL)
        if wipe:
            shutil.rmtree(worker.data_dir)  # rebuilt from the changelog
        worker.start()
    assert feeder.join() == len(stream.records)
    waited = wait_drained(broker, names, timeout=900, workers=workers)
    report = asyncio.run(verify_pipeline(settings_of(broker, names, 4, ENV), first_copy=True))

    # The age the input says each id has: the time of its last copy (copies of an id share a
    # partition and arrive in order, each within the window of the one before).
    inputs = asyncio.run(read_topic(broker.bootstrap, names.input_topic))
    last: dict[bytes, int] = {}
    for r in inputs:
        assert r.key is not None
        last[r.key] = max(last.get(r.key, 0), r.timestamp_ms)
    worker.kill(signal.SIGTERM)
    survivor, survivor_counted = held_state(worker.data_dir)
    shutil.rmtree(worker.data_dir)
    worker.start()
    worker.wait_ready()
    worker.kill(signal.SIGTERM)
    rebuilt, rebuilt_counted = held_state(worker.data_dir)
    print(f"\nF23: {len(survivor):,} ids held, {survivor_counted:,} counted; rebuilt equal")
    assert survivor == last  # every id, armed at its last copy
    assert rebuilt == survivor and rebuilt_counted == survivor_counted == len(survivor)
    record(
        reliability,
        "F23 DEDUPE_WINDOW_FROM=last_seen: ids repeating for 3 windows, kill -9 x2 (once "
        "wiped: rebuilt from the changelog), the same ids and ages after a last rebuild",
        len(stream.records),
        2,
        report,
        waited,
    )
