"""Segment's analytics.js (``@segment/analytics-next``, pinned in tests/browser/package.json)
in headless Chromium, on a page served from another origin than the ingest's, sends 200 track,
20 page and 20 identify calls through CORS preflights; the ingest process dies mid-stream right
after Kafka acknowledged a request and before answering it (the answer is lost, the SDK
retries), restarts on the same port, and every event comes out of a real dedup worker exactly
once.

How to run: ``make test-browser`` (installs Chromium and the SDK, then runs this file); it
prints the counts it measured.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from scripts.topic_reader import read_topic
from scripts.verify import check
from tests.browser.support import Chromium, PageServer
from tests.ingest.support import WRITE_KEY, IngestProcess, records_in
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

PARTITIONS = 4
INGEST_PORT = 19505
PAGE_PORT = 19511  # another port: another origin than the ingest's
CALLS = {"tracks": 200, "pages": 20, "identifies": 20}
CRASH_AFTER = 100  # acknowledged requests before the ingest dies without answering


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    server = PageServer(PAGE_PORT)
    server.start()
    yield server
    server.stop()


def test_analytics_js_from_another_origin_through_an_ingest_crash_exactly_once(
    broker: Broker, names: Names, workers: list[Worker], tmp_path: Path, page_server: PageServer
) -> None:
    worker = Worker(broker, names, partitions=PARTITIONS)  # creates the input topic
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    service = IngestProcess(
        broker,
        names.input_topic,
        tmp_path / "ingest.log",
        port=INGEST_PORT,
        # Only the page's origin: the test fails if the preflight's allow list were ignored.
        extra_env={
            "DEDUPE_INGEST_CORS_ORIGINS": page_server.origin,
            "DEDUPE_INGEST_CRASH_AFTER_ACKS": str(CRASH_AFTER),
        },
    )
    service.start()
    service.wait_ready()
    query = urllib.parse.urlencode(
        {"ingest": f"127.0.0.1:{INGEST_PORT}", "writeKey": WRITE_KEY, "paceMs": 20, **CALLS}
    )
    browser = Chromium(f"{page_server.origin}/?{query}", tmp_path / "profile", tmp_path / "c.log")
    started = time.monotonic()
    browser.start()
    try:
        assert wait_exit(service, 90) == 137, service.log_text()[-3000:]
        crashed_at = time.monotonic() - started
        assert page_server.reports == [], "the page had sent every event before the crash"
        service.extra_env = {"DEDUPE_INGEST_CORS_ORIGINS": page_server.origin}
        service.start()  # same port; the SDK has been retrying meanwhile
        service.wait_ready()
        report = page_server.wait_report(120)
        assert "error" not in report, report["error"]
        sent = {message_id: kind for kind, message_id in report["ids"]}
        assert Counter(sent.values()) == {"track": 200, "page": 20, "identify": 20}
        clean = wait_for_every_id(broker, names, workers, set(sent), timeout=120)
        elapsed = time.monotonic() - started
    finally:
        browser.stop()
        service.stop()
    written = records_in(broker, names.input_topic)
    log = service.log_text()
    assert f"fault injection: exiting after {CRASH_AFTER} acknowledged requests" in log
    assert "not in DEDUPE_INGEST_CORS_ORIGINS" not in log
    assert written > len(sent), "the request whose answer was lost was not written twice"
    for doc in clean:
        assert doc["context"]["library"]["name"] == "analytics.js"
        assert doc["type"] == sent[doc["messageId"]]
    print(
        f"\nanalytics.js from {page_server.origin} to 127.0.0.1:{INGEST_PORT}: sent "
        f"{len(sent)} events, ingest crashed after {CRASH_AFTER} acked requests at "
        f"{crashed_at:.1f}s and restarted; input topic {written} records "
        f"({written - len(sent)} written twice), clean topic {len(clean)} distinct, "
        f"0 duplicates, in {elapsed:.1f}s"
    )


def wait_exit(service: IngestProcess, timeout: float) -> int:
    """The exit status of the ingest process, which dies after its CRASH_AFTER-th ack."""
    assert service.proc is not None
    try:
        return service.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        raise AssertionError(
            f"the ingest did not reach {CRASH_AFTER} acknowledged requests in {timeout}s "
            f"(were the page's requests blocked?):\n{service.log_text()[-3000:]}"
        ) from None


def wait_for_every_id(
    broker: Broker, names: Names, workers: list[Worker], ids: set[str], timeout: float
) -> list[dict[str, object]]:
    """Wait until the clean topic holds every sent id (the SDK may still be retrying), then
    check it holds exactly those, each once; returns the clean events."""
    deadline = time.monotonic() + timeout
    while True:
        wait_drained(broker, names, timeout=timeout, workers=workers)
        records = asyncio.run(read_topic(broker.bootstrap, names.output_topic))
        if len({r.key for r in records}) >= len(ids) or time.monotonic() > deadline:
            break
        time.sleep(1)
    report = check(names.output_topic, records, {i.encode(): b"" for i in ids})
    assert report.duplicates == 0, report.line() + "\n" + "\n".join(report.examples)
    assert (report.missing, report.unexpected) == (0, 0), "\n".join(report.examples)
    return [json.loads(r.value or b"") for r in records]
