"""The ingest benchmark's pure parts: request bodies, the bare handler's split, the report."""

from __future__ import annotations

import argparse
import gzip
import json

from bench.ingest import SERVERS, render
from bench.ingest_bare import events_of
from bench.ingest_load import CASES, Phase, bodies, headers, path


def test_bodies_carry_their_events_with_fresh_message_ids() -> None:
    for case, (size, gzipped) in CASES.items():
        made = bodies(case, count=5)
        ids = [i for b in made for i in b.ids]
        assert len(ids) == len(set(ids)) == 5 * size
        doc = json.loads(gzip.decompress(made[0].data) if gzipped else made[0].data)
        events = [doc] if size == 1 else doc["batch"]
        assert [e["messageId"] for e in events] == made[0].ids
        assert ("Content-Encoding" in headers(case)) == gzipped
        assert path(case) == ("/v1/track" if size == 1 else "/v1/batch")


def test_the_bare_handler_splits_a_batch_and_takes_a_single_event_whole() -> None:
    one = {"type": "track", "messageId": "m1"}
    assert events_of("track", one) == [one]
    assert events_of("batch", {"batch": [one, "junk", one]}) == [one, one]
    assert events_of("batch", {"batch": "junk"}) == []


def _phase(events: int, per_request: int, seconds: float = 10.0) -> Phase:
    p = Phase(seconds=seconds, requests=events // per_request, events=events)
    p.ack_latencies = [0.010] * 98 + [0.050, 0.200]
    return p


def test_the_report_judges_each_case_against_the_bare_handler() -> None:
    results = {
        "bare": {c: (_phase(10_000 * CASES[c][0], CASES[c][0]), 2.0) for c in CASES},
        "ingest": {c: (_phase(9_000 * CASES[c][0], CASES[c][0]), 3.0) for c in CASES},
    }
    results["ingest"]["single"] = (_phase(7_000, 1), 3.0)
    latencies = {name: (_phase(3_000, 1), [0.1] * 2_990) for name in SERVERS}
    args = argparse.Namespace(
        concurrency=32, seconds=10.0, latency_rate=200.0, latency_seconds=15.0
    )
    text = render(results, latencies, args, "python -m bench.ingest")
    assert "- single: NOT MET (0.70x)" in text
    assert "- batch100: MET (0.90x)" in text and "- batch100-gzip: MET (0.90x)" in text
    assert "| single | ingest service | 700 | 700 | 0.70x | 10 |" in text
    assert "2,990 of 3,000 |" in text
