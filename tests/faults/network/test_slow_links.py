"""F9a latency spikes of seconds on every request, F9b connection resets in the middle of commits:
each during a flowing stream, each ending exactly once."""

from __future__ import annotations

import random
import time

import pytest

from tests.faults.conftest import SCALE, Reliability
from tests.faults.kafka_frames import (
    END_TXN,
    PRODUCE,
    TxnRequest,
)
from tests.faults.network.support import Net, proxied, proxy_line
from tests.faults.proxy import Link
from tests.faults.proxy_conn import Action
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.support import Names
from tests.workers import Worker

pytestmark = pytest.mark.faults


@pytest.mark.both_protocols
def test_f9a_latency_spikes_of_seconds_on_every_request(
    net: Net, links: list[Link], names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """Both workers' links take 2-5 s per request and per answer (heartbeats too, past the 3 s
    session: the group churns) in spikes of 5 s, 3 s apart, alternating with spikes where the
    bytes crawl at 20 KB/s, while the stream flows."""
    proxied(net, names, workers, 0)
    proxied(net, names, workers, 1)
    stream = scaled_stream(15_000, seed=91)
    feeder = Feeder(net.broker, names, stream, seconds=30)
    spikes: list[str] = []
    time.sleep(3)
    while feeder.flowing() and len(spikes) < 4:
        slow = len(spikes) % 2 == 1
        for link in links[:2]:
            if slow:
                link.rate = 20_000
            else:
                link.latency, link.jitter = 3.5, 1.5
        spikes.append("slow" if slow else "latency")
        time.sleep(5)
        for link in links[:2]:
            link.latency = link.jitter = 0.0
            link.rate = None
        time.sleep(3)
    assert spikes.count("latency") >= 2, f"the stream ended after the spikes {spikes}"
    feeder.finish()
    report, waited = drain_and_verify(net.broker, names, workers)
    logs = "".join(w.log_text() for w in workers)
    print(
        f"\nF9a: spikes {spikes}; in the workers' logs: {logs.count('Heartbeat failed')} failed "
        f"heartbeats, {logs.count('assigned partitions')} assignments, "
        f"{logs.count('commit outcome unknown')} commits of unknown outcome, "
        f"{logs.count('was fenced')} fenced; " + proxy_line(links)
    )
    record(
        reliability,
        "F9a latency spikes of 2-5 s on every request and answer, and bytes slowed to 20 KB/s "
        "(both workers, 5 s each)",
        len(stream.records),
        len(spikes),
        report,
        waited,
    )


@pytest.mark.both_protocols
def test_f9b_connection_resets_in_the_middle_of_commits(
    net: Net, links: list[Link], names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """The proxy resets a worker's connection when a commit (``EndTxn``) passes: before it
    reaches the broker (the commit is lost) or right after (the commit is done, its answer
    lost), alternately, on every third commit; and after every 150th produce request (the
    batch written, the answer lost: the producer sends it again). aiokafka sends a commit
    whose connection broke again on a new one; the broker must take the copy of a commit it
    already has as that commit (it does: answer 0, and the verifier finds each id once)."""
    resets: dict[str, int] = {"before": 0, "after": 0, "produce": 0}
    rng = random.Random(92)
    seen = {"commits": 0, "produces": 0}
    limit = 12 * SCALE

    def on_request(api_key: int, txn: TxnRequest | None) -> Action:
        if sum(resets.values()) >= limit:
            return None
        if api_key == END_TXN and txn is not None and txn.committed:
            seen["commits"] += 1
            if seen["commits"] % 3 == 0:
                how = "after" if resets["after"] <= resets["before"] else "before"
                resets[how] += 1
                return "reset-after" if how == "after" else "reset-before"
        elif api_key == PRODUCE:
            seen["produces"] += 1
            if seen["produces"] % 150 == rng.randrange(150):
                resets["produce"] += 1
                return "reset-after"
        return None

    for link in links[:2]:
        link.on_request = on_request
    proxied(net, names, workers, 0, DEDUPE_COMMIT_TIMEOUT="10s")
    proxied(net, names, workers, 1, DEDUPE_COMMIT_TIMEOUT="10s")
    stream = scaled_stream(15_000, seed=93)
    feeder = Feeder(net.broker, names, stream, seconds=25)
    feeder.join()
    report, waited = drain_and_verify(net.broker, names, workers)
    # A commit whose connection was reset is sent again by aiokafka on a new connection (the
    # same producer id and epoch): after "reset-after" the broker has it already and must
    # answer the second copy as a success of the same transaction, not commit anything twice.
    again: list[int | None] = []  # the broker's answers to those second copies
    for link in links[:2]:
        log = [t for t in link.txn_log() if t.api_key == END_TXN]
        for i, t in enumerate(log):
            if t.action == "reset-after":
                key = (t.producer_id, t.epoch, t.transactional_id)
                retry = next(
                    (
                        r
                        for r in log[i + 1 :]
                        if (r.producer_id, r.epoch, r.transactional_id) == key
                    ),
                    None,
                )
                if retry is not None:
                    again.append(retry.error)
    print(
        f"\nF9b: resets {resets} of {seen}; answers to the commits sent again after "
        f"reset-after: {again}; " + proxy_line(links)
    )
    record(
        reliability,
        "F9b connection resets mid-commit (EndTxn lost, or done with its answer lost) and "
        "after produce requests",
        len(stream.records),
        sum(resets.values()),
        report,
        waited,
    )
    assert resets["before"] >= 3 and resets["after"] >= 3, resets
    assert len(again) == resets["after"], "a commit whose answer was lost was not sent again"
