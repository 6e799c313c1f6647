"""F25: a rolling upgrade, as docs/operations.md "Upgrading" prescribes it: three workers with a
standby replica each, stopped (SIGTERM) and started again one at a time, the next only once the
last is ready again, while a steady stream flows. Each stop hands the worker's partitions to
the others (warm standby copies), each start takes some back. Exactly once throughout.

The restarted workers run the same code (a test cannot ship two releases); what a rolling
upgrade adds to a plain restart is the version checks: the unit and integration tiers read the
kept fixtures of the current formats (tests/unit/tables/test_format_fixtures.py,
tests/integration/test_changelog_fixture.py), and the last two tests here start a real worker
on a changelog and on a data dir of a newer format, which it must refuse.

    DEDUPE_TEST_KAFKA_PORT=19092 .venv/bin/python -m pytest tests/faults/test_rolling_upgrade.py
"""

from __future__ import annotations

import asyncio
import json
import shutil
import signal
import time

import pytest

from scripts.topic_reader import end_offsets
from tables.formats import CHANGELOG, CHANGELOG_FIELD, DATA_DIR, DATA_DIR_FILE
from tables.source_offsets import SOURCE_OFFSETS_KEY
from tests.faults.conftest import Reliability
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.faults.test_restore_faults import restores_logged
from tests.integration.test_changelog_fixture import produce_transactions
from tests.support import Broker, Names
from tests.workers import Worker, get

pytestmark = pytest.mark.faults

PARTITIONS = 6
WORKERS = 3


def all_ready(fleet: list[Worker], timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    # Twice in a row: a rebalance that starts right after one answer makes the next a 503.
    streak = 0
    while streak < 2:
        assert time.monotonic() < deadline, "the workers never all answered /ready"
        for w in fleet:
            assert w.alive(), f"worker {w.index} exited:\n{w.log_text()[-3000:]}"
        streak = streak + 1 if all(get(w, "/ready")[0] == 200 for w in fleet) else 0
        time.sleep(0.5)


def test_f25_rolling_upgrade_one_worker_at_a_time_under_load(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    env = {"DEDUPE_STANDBY_REPLICAS": "1"}
    fleet = [
        Worker(broker, names, index=i, partitions=PARTITIONS, extra_env=env) for i in range(WORKERS)
    ]
    workers.extend(fleet)
    for worker in fleet:
        worker.start()
        worker.wait_ready()
    stream = scaled_stream(45_000, seed=25)
    # Steady over ~100 s: longer than the three stops and starts, so every restart meets a
    # flowing stream (asserted before each one and after the last, when the rest goes at once).
    feeder = Feeder(broker, names, stream, seconds=100)
    time.sleep(8.0)
    ready_s = []
    for worker in fleet:
        feeder.assert_flowing()
        stopped = time.monotonic()
        assert worker.kill(signal.SIGTERM) == 0, worker.log_text()[-3000:]
        worker.start()
        worker.wait_ready()
        # As the procedure says: the next stop only once every worker answers /ready (the
        # others' takeovers and the partitions this one got back are restored).
        all_ready(fleet)
        ready_s.append(time.monotonic() - stopped)
    feeder.assert_flowing()
    assert feeder.finish() == len(stream.records)
    report, waited = drain_and_verify(broker, names, workers, partitions=PARTITIONS)
    logs = [w.log_text() for w in fleet]
    restored = sum(sum(restores_logged(text).values()) for text in logs)
    changelog = sum(
        asyncio.run(end_offsets(broker.bootstrap, f"{names.app_id}-seen_ids-changelog")).values()
    )
    print(
        f"\nrolling upgrade: events={len(stream.records)} restarts={WORKERS} "
        f"SIGTERM to every worker ready {', '.join(f'{s:.1f}s' for s in ready_s)}; "
        f"changelog offsets restored over the run: {restored} of {changelog}"
    )
    # Every worker stopped cleanly and came back: two "Ready" lines each.
    assert all(text.count("[^Worker]: Ready") == 2 for text in logs)
    record(
        reliability,
        "F25 rolling upgrade (3 workers, 1 standby, SIGTERM and restart one at a time)",
        len(stream.records),
        WORKERS,
        report,
        waited,
    )


def test_a_worker_stops_on_a_changelog_transaction_of_a_newer_format(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    """The rollback hazard the two-step changelog change avoids: an older worker meets a
    transaction a newer version wrote. Restoring it into an empty data dir, the worker must
    stop with the refusal (tables/formats.py), not go on and decide records against it."""
    worker = Worker(broker, names, partitions=1)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    assert worker.kill(signal.SIGTERM) == 0
    newer = {names.input_topic: 5, CHANGELOG_FIELD: CHANGELOG.current + 1}
    asyncio.run(
        produce_transactions(
            broker.bootstrap,
            f"{names.app_id}-seen_ids-changelog",
            [(0, [(b"m-newer", b"\x00" * 24), (SOURCE_OFFSETS_KEY, json.dumps(newer).encode())])],
        )
    )
    shutil.rmtree(worker.data_dir)
    worker.start()
    deadline = time.monotonic() + 120
    while worker.alive():
        assert time.monotonic() < deadline, "the worker went on with a newer changelog format"
        time.sleep(0.5)
    last = worker.last_start_log()
    assert "partition 0 is in changelog format 2; this worker reads 1" in last, last[-3000:]
    assert "Crashed reason=FormatRefused" in last
    # It never became ready, so it never decided a record against that state.
    assert "[^Worker]: Ready" not in last
    assert worker.proc is not None and worker.proc.returncode != 0


def test_a_worker_stops_on_a_data_dir_of_a_newer_format_and_leaves_it_alone(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    """An older worker started on a data dir a newer version wrote (tables/data_dir.py)."""
    worker = Worker(broker, names, partitions=1)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    assert worker.kill(signal.SIGTERM) == 0
    (version_file,) = worker.data_dir.rglob(DATA_DIR_FILE)
    assert json.loads(version_file.read_text()) == {"format": DATA_DIR.current}
    newer = json.dumps({"format": DATA_DIR.current + 1})
    version_file.write_text(newer)
    before = sorted(p.name for p in version_file.parent.rglob("*"))
    worker.start()
    deadline = time.monotonic() + 120
    while worker.alive():
        assert time.monotonic() < deadline, "the worker went on with a newer data dir"
        time.sleep(0.5)
    last = worker.last_start_log()
    refusal = "is in data dir format 2; this worker reads 1: it was written by a newer version"
    assert refusal in last, last[-3000:]
    assert "[^Worker]: Ready" not in last
    assert version_file.read_text() == newer
    assert sorted(p.name for p in version_file.parent.rglob("*")) == before
