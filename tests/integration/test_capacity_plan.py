"""``python -m app plan`` against a measured run, and the window forecast on a real worker.

The first test runs a pipeline at a known new-id rate (in record time, the window's clock) with
a size cap it outgrows, then compares what the sizing tool predicts with what the worker
reports: ids held per partition, the effective window, and the disk of its partition databases
(measured once the worker stopped gracefully, its memtables flushed). The others show the
forecast's warning in ``/stats`` and the log when the cap is small for the observed rate,
before the cap is reached, at start-up from the restored state too, and none when the cap is
large enough.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from rocksdict import BottommostLevelCompaction, CompactOptions, Rdict

from app.admin.capacity.figures import load
from app.admin.capacity.model import Load, plan
from tables.rocks_options import RocksTuning, store_options
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, get, wait_drained

pytestmark = pytest.mark.integration

#: Record times start this long ago: inside the broker's 7-day retention, and every record
#: of a run is in the past.
T0 = (int(time.time()) - 3 * 3600) * 1000

#: Tolerances, and why they can be this tight: murmur2 spreads random UUIDs evenly (two
#: partitions of 400,000 ids differ by well under 1% from half each), and the cap is exact.
HELD_TOLERANCE = 0.02
WINDOW_TOLERANCE = 0.03
#: Disk: the tool's figure is measured at 6.25M ids per partition after a full compaction
#: (bench/results-scale.md), so the databases are compacted with the worker's own options
#: (offline, after the graceful stop) before they are measured. At rest, before that, a small
#: partition that evicted also holds the tombstones of its evicted ids and level-0 files that
#: keep each key's sequence number (the report prints both figures): with the ids stored once
#: that is a third more bytes than compacted, more than this tolerance.
DISK_TOLERANCE = 0.25


async def send_at_rate(bootstrap: str, topic: str, count: int, per_second: float) -> None:
    """``count`` events with new UUID messageIds, record times ``per_second`` apart from T0,
    keyed by the id (Kafka's default partitioner, as producers do)."""
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=20, max_batch_size=512 * 1024
    )
    await producer.start()
    try:
        futures = []
        for i in range(count):
            mid = str(uuid.uuid4())
            body = json.dumps({"type": "track", "event": "Sized", "messageId": mid}).encode()
            ts = T0 + int(i * 1000 / per_second)
            futures.append(await producer.send(topic, body, key=mid.encode(), timestamp_ms=ts))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def stats(worker: Worker) -> dict[str, Any]:
    status, body = get(worker, "/stats")
    assert status == 200, body
    partitions: dict[str, Any] = body["partitions"]
    return partitions


def seen_ids_disk(data_dir: Path) -> dict[int, int]:
    """Bytes allocated by each partition database of seen_ids (whole directories, as
    bench/results-scale.md's figure counts them)."""
    out = {}
    for db in sorted(data_dir.rglob("seen_ids-*.db")):
        partition = int(db.name.rsplit("-", 1)[1].split(".")[0])
        out[partition] = sum(f.stat().st_blocks * 512 for f in db.rglob("*") if f.is_file())
    return out


def compact(data_dir: Path) -> None:
    """Compact every seen_ids partition database (the worker stopped): as the figure the tool
    sizes from was measured."""
    # Forced down to the last level: one level-0 file would otherwise only be moved there,
    # tombstones and all.
    full = CompactOptions()
    full.set_bottommost_level_compaction(BottommostLevelCompaction.force())
    options = store_options(RocksTuning())  # the worker's own (zstd blocks among them)
    for path in sorted(data_dir.rglob("seen_ids-*.db")):
        names = [n for n in Rdict.list_cf(str(path)) if n != "default"]
        families = {n: options.families for n in names}
        db = Rdict(str(path), options.ids, column_families=families)
        try:
            for family in (db, *(db.get_column_family(n) for n in names)):
                family.compact_range(None, None, full)
        finally:
            db.close()


def files(data_dir: Path, partition: int) -> list[tuple[str, int]]:
    """The files of one partition's database and their sizes (for a failure's report)."""
    [db] = data_dir.rglob(f"seen_ids-{partition}.db")
    return sorted((f.name, f.stat().st_size) for f in db.rglob("*") if f.is_file())


def close_to(measured: float, predicted: float, tolerance: float) -> bool:
    return abs(measured - predicted) <= tolerance * predicted


def test_the_plan_predicts_the_ids_held_the_effective_window_and_the_disk(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    rate, count, partitions, cap = 100.0, 400_000, 2, 150_000
    env = {
        "DEDUPE_WINDOW": "1d",
        "DEDUPE_MAX_IDS_PER_PARTITION": str(cap),
        "DEDUPE_MIN_WINDOW": "1h",
    }
    worker = Worker(broker, names, partitions=partitions, extra_env=env)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    asyncio.run(send_at_rate(broker.bootstrap, names.input_topic, count, rate))
    wait_drained(broker, names, timeout=600, workers=workers)

    argv = ["--new-ids-per-second", "100", "--window", "1d", "--partitions", "2"]
    argv += ["--workers", "1", "--max-ids-per-partition", str(cap)]
    printed = subprocess.run(
        [sys.executable, "-m", "app", "plan", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    predicted = plan(
        Load(rate, rate, 86400.0, 3600.0, 0.0, 36, True, partitions, 1, cap, 3600.0, 3),
        load(),
    )
    assert predicted.capped and predicted.ids_held_per_partition == cap
    assert predicted.effective_window == 3000.0  # 150,000 ids / 50 new ids/s
    assert "ids held" in printed and "150,000 (cap)" in printed and "50.0 min" in printed

    measured = stats(worker)
    report = []
    for p, s in sorted(measured.items()):
        window_s = s["effective_window_ms"] / 1000
        report.append(f"partition {p}: held {s['ids_held']:,}, effective window {window_s:,.0f} s")
        assert close_to(s["ids_held"], predicted.ids_held_per_partition, HELD_TOLERANCE), report
        assert close_to(window_s, predicted.effective_window, WINDOW_TOLERANCE), report
        assert s["evicted"] > 0 and s["window_forecast"]["warning"] is not None, s

    # Disk at rest: the worker stopped gracefully (its memtables flushed).
    assert worker.kill(signal.SIGTERM) == 0
    at_rest = seen_ids_disk(worker.data_dir)
    compact(worker.data_dir)
    disk = seen_ids_disk(worker.data_dir)
    assert sorted(disk) == [0, 1], disk
    for p, allocated in disk.items():
        report.append(
            f"partition {p}: {allocated:,} bytes on disk compacted, predicted "
            f"{predicted.disk_per_partition:,.0f} ({allocated / cap:.1f} bytes per id; at rest "
            f"before the compaction {at_rest[p] / cap:.1f})"
        )
        assert close_to(allocated, predicted.disk_per_partition, DISK_TOLERANCE), (
            report,
            files(worker.data_dir, p),
        )
    print("\n".join(report))


def log_of_start(worker: Worker, start: int) -> str:
    return worker.log_text().split(f"===== start {start} =====", 1)[1]


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, f"no {what} after {timeout}s"
        time.sleep(0.5)


@pytest.mark.parametrize(("cap", "short"), [(10_000, True), (10_000_000, False)])
def test_the_forecast_warns_in_stats_and_the_log_before_the_cap_is_reached(
    broker: Broker, names: Names, workers: list[Worker], cap: int, short: bool
) -> None:
    # Slots of one second (DEDUPE_BUCKET / 16): the oldest id held is known to a slot, and
    # the rate over the ids held (200 s of them here) prints to a tenth at this precision.
    env = {
        "DEDUPE_WINDOW": "1d",
        "DEDUPE_BUCKET": "16s",
        "DEDUPE_MAX_IDS_PER_PARTITION": str(cap),
    }
    worker = Worker(broker, names, partitions=1, extra_env={**env, "DEDUPE_MIN_WINDOW": "1h"})
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    # 2,000 new ids at 10 per second of record time: the cap holds cap / 10 seconds
    asyncio.run(send_at_rate(broker.bootstrap, names.input_topic, 2_000, 10.0))
    wait_drained(broker, names, timeout=300, workers=workers)
    s = stats(worker)["0"]
    assert s["ids_held"] == 2_000 and s["evicted"] == 0  # the cap is not reached
    f = s["window_forecast"]
    assert f["new_ids_per_second_held"] == pytest.approx(10.0, rel=0.01)
    assert f["predicted_window_ms"] == pytest.approx(cap * 100, rel=0.01)
    phrase = f"size cap (DEDUPE_MAX_IDS_PER_PARTITION={cap}) holds"
    quiet = "partition 0: the size cap holds 277.6 h of ids at the observed new-id rate"
    if short:
        assert f["warning"].startswith("partition 0: at 10.0 new ids/s") and phrase in f["warning"]
        wait_for("warning in the log", lambda: phrase in log_of_start(worker, 0), 45)
    else:
        assert f["warning"] is None
        wait_for("forecast in the log", lambda: quiet in log_of_start(worker, 0), 45)
    # A restart: the first check after the restore tells, before any new record arrives.
    assert worker.kill(signal.SIGTERM) == 0
    worker.start()
    worker.wait_ready()
    wait_for(
        "forecast at start-up", lambda: (phrase if short else quiet) in log_of_start(worker, 1), 15
    )
    assert (stats(worker)["0"]["window_forecast"]["warning"] is not None) == short
    if not short:
        assert "size cap (DEDUPE_MAX_IDS_PER_PARTITION" not in worker.log_text()
