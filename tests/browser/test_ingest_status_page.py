"""The ingest service's status page (``GET /``, ingest/status_page.py) in headless Chromium:
a real ``python -m ingest`` on a real broker answers 30 batches of 5 events and 4 malformed
requests; the page, drawn from the service's ``/metrics``, shows those counts per endpoint and
status, 150 events acknowledged, and the service ready. The DOM Chromium built is read back; a
screenshot is kept in .cache/test-artifacts/.

How to run: ``make test-browser``.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.browser.test_status_page import ARTIFACTS, chromium
from tests.ingest.cases import sdk_event
from tests.ingest.support import IngestProcess, json_headers
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.integration

INGEST_PORT = 19506


def post(url: str, body: bytes) -> int:
    request = urllib.request.Request(url, data=body, headers=json_headers(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_ingest_status_page_shows_its_answers_and_events(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path
) -> None:
    worker = Worker(broker, names)  # creates the input topic
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    service = IngestProcess(broker, names.input_topic, tmp_path / "ingest.log", port=INGEST_PORT)
    service.start()
    try:
        service.wait_ready()
        for i in range(30):
            batch = {"batch": [sdk_event(i * 5 + j) for j in range(5)]}
            assert post(f"{service.url}/v1/batch", json.dumps(batch).encode()) == 200
        for _ in range(4):
            assert post(f"{service.url}/v1/batch", b"{not json") == 400
        dom = chromium(f"{service.url}/", tmp_path / "profile", "--dump-dom")
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / "ingest-status-page.png"
        chromium(f"{service.url}/", tmp_path / "profile", f"--screenshot={shot}")
    finally:
        service.stop()
    rows = {
        key: re.findall(r"<td>(.*?)</td>", cells)
        for key, cells in re.findall(r'<tr data-key="([^"]+)"[^>]*>(.*?)</tr>', dom)
    }
    assert rows["batch 200"][:3] == ["batch", "200", "30"], rows
    assert rows["batch 400"][:3] == ["batch", "400", "4"], rows
    assert rows["events batch"][:2] == ["batch", "150"], rows
    assert 'class="badge ok">ready<' in dom
    assert shot.stat().st_size > 5_000
    print(f"\ningest status page: {len(rows)} rows; {shot}")
