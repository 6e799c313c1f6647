"""``make demo`` against a real worker started as ``make run`` starts it (with
DEDUPE_MISSING_ID=fingerprint): every strategy's line of the table is a success, nothing
dead-lettered but the bad records, and the fingerprint line names its setting."""

from __future__ import annotations

import asyncio
import re

import pytest

from scripts.demo import run
from tests.faults.scenario import settings_of
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.integration

LINE = re.compile(
    r"^  (\w+)\s+sent\s+([\d,]+)\s+forwarded\s+([\d,]+)\s+dropped as duplicates\s+([\d,]+)"
    r"\s+dead-lettered ([\d,]+)$"
)


def test_demo_on_a_fingerprinting_worker_reads_as_success(
    broker: Broker, names: Names, workers: list[Worker], capsys: pytest.CaptureFixture[str]
) -> None:
    env = {"DEDUPE_MISSING_ID": "fingerprint"}
    worker = Worker(broker, names, extra_env=env)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    settings = settings_of(broker, names, worker.partitions, env)
    status = asyncio.run(run(settings, events=1_000, repeats=0.06, timeout=60))
    out = capsys.readouterr().out
    print(out)
    assert status == 0, out
    lines = out.splitlines()
    rows = {
        m[1]: [int(g.replace(",", "")) for g in m.groups()[1:]] for m in map(LINE.match, lines) if m
    }
    assert set(rows) == {"message_id", "producer_sequence", "fingerprint"}, out
    for kind, (sent, forwarded, dropped, dead) in rows.items():
        assert forwarded > 0 and dead == 0 and sent == forwarded + dropped, (kind, out)
    assert rows["fingerprint"] == [200, 100, 100, 0]
    at = next(i for i, line in enumerate(lines) if line.startswith("  fingerprint"))
    assert lines[at + 1].strip() == "(with DEDUPE_MISSING_ID=fingerprint)"
    assert "  bad records        dead-lettered 5 (as they should be)" in lines
