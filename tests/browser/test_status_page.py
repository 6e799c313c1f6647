"""The worker's status page (``GET /``, app/web/status_page.py) in headless Chromium: two workers
dedup a stream with repeats; the page of one of them, opened with ``?id=`` of an id the other
worker owns, draws a row for each partition it owns with the figures of ``/stats`` and answers
the lookup (forwarded by the worker to the owner) with where the id's one copy went. The DOM
Chromium built is read back, and a screenshot is kept in .cache/test-artifacts/.

How to run: ``make test-browser``.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import urllib.request
from pathlib import Path

import pytest

from app.rules import partition_for
from scripts.streams import build_stream, produce
from tests.browser.support import CHROMIUM_FLAGS, chromium_binary
from tests.support import ROOT, Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4
ARTIFACTS = ROOT / ".cache" / "test-artifacts"


def chromium(url: str, profile: Path, *args: str) -> str:
    """Chromium run headless on ``url`` until its scripts settled (virtual time); its stdout."""
    done = subprocess.run(
        [
            chromium_binary(),
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            "--virtual-time-budget=8000",
            "--window-size=1280,900",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def get_json(url: str) -> dict:  # type: ignore[type-arg]
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)  # type: ignore[no-any-return]


def test_the_status_page_draws_the_partitions_and_answers_a_lookup(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    for i in range(2):
        w = Worker(broker, names, index=i, partitions=PARTITIONS)
        workers.append(w)
        w.start()
    for w in workers:
        w.wait_ready()
    stream = build_stream(2_000, 0.2, seed=3)
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, 120, workers)

    page = workers[0]
    base = f"http://127.0.0.1:{page.web_port}"
    stats = get_json(f"{base}/stats")
    mine = set(stats["partitions"])
    assert mine and len(mine) < PARTITIONS, mine  # the other worker owns the rest
    # An id of a partition the page's worker does not own: its lookup is forwarded.
    wanted = next(
        r.message_id
        for r in stream.records
        if str(partition_for(r.message_id.encode(), PARTITIONS)) not in mine
    )
    url = f"{base}/?id={wanted}"
    dom = chromium(url, tmp_path / "profile", "--dump-dom")

    rows = dict(re.findall(r'<tr data-partition="(\d+)">(.*?)</tr>', dom))
    assert set(rows) == mine, dom[-3000:]
    for p, row in rows.items():
        figures = re.findall(r"<td>(.*?)</td>", row)
        s = stats["partitions"][p]
        assert figures[0] == p and figures[1] == s["state"]
        assert figures[3] == f"{s['ids_held']:,}", (figures, s)
        assert figures[7] == f"{s['forwarded']:,}" and figures[8] == f"{s['duplicates_dropped']:,}"
        forecast = s["window_forecast"]  # the last column: the window the cap will leave
        if forecast["predicted_window_ms"] is None:
            assert figures[10] == "-", (figures, forecast)
        else:
            assert figures[10].startswith("short: ") == (forecast["warning"] is not None)
    assert 'class="badge ok">ready<' in dom
    answer = re.search(r'<div id="answer" data-status="(\d+)">(.*?)</div>', dom, re.S)
    assert answer, dom[-3000:]
    assert answer.group(1) == "200", answer.group(2)
    assert f"{wanted}: held since " in answer.group(2)
    assert "forwarded once to " in answer.group(2) and "offset unknown" not in answer.group(2)
    # Repeats are not counted per id by default (DEDUPE_COUNT_REPEATS): no count to show.
    assert "repeats dropped" not in answer.group(2) and "null" not in answer.group(2)

    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    shot = ARTIFACTS / "status-page.png"
    chromium(url, tmp_path / "profile", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
    print(f"\nstatus page: {len(rows)} partitions drawn, lookup of {wanted} answered; {shot}")
