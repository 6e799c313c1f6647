"""Network faults between the clients and the broker, through the fault proxy
(``tests/faults/proxy.py``): F9 a worker partitioned from the broker (both directions, and one
direction only), F9a latency spikes of seconds on every request, F9b connection resets in the
middle of commits, F15 a transaction the broker aborts on its timeout while the worker is
stopped, F18 the ingest service's link to Kafka cut while the Segment SDK retries. Each during
a flowing stream, each ending exactly once (the verifier, ``drain_and_verify``).

These tests run on a broker of their own (port ``DEDUPE_TEST_KAFKA_PORT`` + 10, controller + 11,
started here and stopped at the end of the module), whose extra listeners ``L0..L3`` listen on
+12, +14, +16, +18 and advertise +13, +15, +17, +19, where the links' proxies listen: a client
that bootstraps through a proxy is told to connect to the proxy again, so every one of its
connections goes through the link. The tier's shared broker cannot serve: it is started once and
left running across tiers and sessions, without those listeners.

How to run: ``make test-faults`` (the whole tier), or
``DEDUPE_TEST_KAFKA_PORT=19092 .venv/bin/python -m pytest -q -s tests/faults/test_network.py``.
Each test prints its figures and the proxy's (connections, resets, bytes dropped).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from segment.analytics.client import Client

from scripts.topic_reader import read_topic
from tests.conftest import TEST_PORT
from tests.faults.conftest import SCALE, Reliability
from tests.faults.kafka_frames import (
    ADD_PARTITIONS_TO_TXN,
    END_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    SYNC_GROUP,
    TxnRequest,
)
from tests.faults.proxy import Link
from tests.faults.proxy_conn import Action
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.ingest.support import WRITE_KEY, IngestProcess, records_in
from tests.support import Broker, Names
from tests.workers import WORKER_TRANSACTION_TIMEOUT, Worker

pytestmark = pytest.mark.faults

BASE = int(os.environ.get("DEDUPE_NETFAULT_KAFKA_PORT", str(TEST_PORT + 10)))
LINKS = 4
SESSION_TIMEOUT = 3.0  # tests.workers.Worker's DEDUPE_SESSION_TIMEOUT
TRANSACTION_TIMEOUT = WORKER_TRANSACTION_TIMEOUT


@dataclass
class Net:
    broker: Broker  # the broker itself (feeders, the verifier)
    links: list[Link]

    def via(self, i: int) -> Broker:
        """The broker as seen through link ``i`` (what a proxied client is given)."""
        return Broker(f"127.0.0.1:{self.links[i].listen_port}", self.broker.port)


@pytest.fixture(scope="module")
def net() -> Iterator[Net]:
    broker = Broker(f"127.0.0.1:{BASE}", BASE)
    listeners = ",".join(f"L{i}:{BASE + 2 + 2 * i}:{BASE + 3 + 2 * i}" for i in range(LINKS))
    os.environ["KAFKA_EXTRA_LISTENERS"] = listeners
    try:
        # Tried again: a port of the broker's can be held for a moment as the local end of some
        # program's outgoing connection when it lies in the ephemeral range (32768-60999 on
        # Linux), and the broker then fails to bind it ("Address already in use").
        for _ in range(3):
            up = broker.script("up", timeout=300)
            if up.returncode == 0 or "Address already in use" not in up.stderr:
                break
            time.sleep(3)
    finally:
        del os.environ["KAFKA_EXTRA_LISTENERS"]
    if up.returncode != 0:
        pytest.fail(f"cannot start the proxied broker:\n{up.stdout}\n{up.stderr}")
    for i in range(LINKS):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", BASE + 2 + 2 * i)) != 0:
                pytest.fail(
                    f"the broker on {BASE} has no listener L{i} on {BASE + 2 + 2 * i}: was it "
                    "started without KAFKA_EXTRA_LISTENERS (scripts/kafka-local.sh)? Stop it "
                    f"(KAFKA_PORT={BASE} scripts/kafka-local.sh down) and run again"
                )
    links = [
        Link(listen_port=BASE + 3 + 2 * i, target_port=BASE + 2 + 2 * i, seed=i).start()
        for i in range(LINKS)
    ]
    try:
        yield Net(broker, links)
    finally:
        for link in links:
            link.stop()
        broker.script("down")


@pytest.fixture
def links(net: Net) -> Iterator[list[Link]]:
    """The links, clear of faults and logs at the start of a test, and again after it."""

    def clear() -> None:
        for link in net.links:
            link.latency = link.jitter = 0.0
            link.rate = None
            link.on_request = None
            link.heal()
            link.txn_requests.clear()
            link.resets = link.connections = link.dropped_bytes = 0

    clear()
    yield net.links
    clear()
    for link in net.links:
        link.reset_all()


def proxied(net: Net, names: Names, workers: list[Worker], i: int, **env: str) -> Worker:
    worker = Worker(net.via(i), names, index=i, extra_env=env)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    return worker


def proxy_line(links: list[Link]) -> str:
    return " | ".join(
        f"L{i}: connections={k.connections} resets={k.resets} dropped={k.dropped_bytes:,}B"
        for i, k in enumerate(links)
        if k.connections
    )


def commits(log: list[TxnRequest]) -> list[TxnRequest]:
    return [t for t in log if t.api_key == END_TXN and t.committed and t.forwarded_at]


#: "both", "from-broker" (A's requests still reach the broker, it hears nothing back),
#: "to-broker", and "held": both directions held from the moment A sends a commit, everything
#: delivered after the heal (A's commit reaches the broker after B took A's partitions over).
#: "to-broker" behaves as "both" for the broker; it runs at DEDUPE_FAULT_SCALE > 1 only.
DIRECTIONS = ["both", "from-broker", "held"] + (["to-broker"] if SCALE > 1 else [])


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_f9_a_partitioned_worker_is_fenced_and_commits_nothing_after_the_heal(
    net: Net,
    links: list[Link],
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    direction: str,
) -> None:
    """Worker A's link is cut (see :data:`DIRECTIONS`) for longer than the session and
    transaction timeouts while the stream flows: B must take A's partitions over
    (``InitProducerId`` for A's transactional ids, which fences A's producers), and after the
    heal no commit of a producer A had before may succeed, nor any commit of A before it has
    joined the group again (the proxy reads every ``EndTxn`` A sends and the broker's answer,
    and A's ``SyncGroup``)."""
    a_link, b_link = links[0], links[1]
    proxied(net, names, workers, 0)
    proxied(net, names, workers, 1)
    stream = scaled_stream(15_000, seed=9)
    feeder = Feeder(net.broker, names, stream, seconds=30)
    time.sleep(4)
    a_ids = {t.transactional_id for t in commits(a_link.txn_log())}
    assert a_ids, "A committed nothing before the cut: the cut would meet an idle worker"
    if direction == "held":
        held = threading.Event()

        def hold_at_commit(api_key: int, txn: TxnRequest | None) -> Action:
            if api_key == END_TXN and txn is not None and txn.committed and not held.is_set():
                a_link.hold()  # this commit is the first thing held
                held.set()
            return None

        a_link.on_request = hold_at_commit
        assert held.wait(10), "A sent no commit to hold"
    else:
        a_link.cut(direction)  # type: ignore[arg-type]
    cut_at = time.monotonic()
    time.sleep(SESSION_TIMEOUT + TRANSACTION_TIMEOUT + 3)
    # Every producer A had until now, the commit held in the link's included.
    before = {(t.producer_id, t.epoch) for t in a_link.txn_log() if t.api_key == END_TXN}
    feeder.assert_flowing()
    healed_at = time.monotonic()
    a_link.heal()
    feeder.join()
    report, waited = drain_and_verify(net.broker, names, workers)
    taken_over = {
        t.transactional_id
        for t in b_link.txn_log()
        if t.api_key == INIT_PRODUCER_ID and cut_at < t.forwarded_at < healed_at
    }
    # A was out of the group from the session timeout on; it is back once it has joined again
    # and sent its SyncGroup. Between the heal and then it owns nothing: no commit of it may
    # succeed, and no commit of a producer it had before the cut may succeed at all.
    rejoined_at = min(
        (t for t, api in a_link.group_requests if api == SYNC_GROUP and t > healed_at),
        default=float("inf"),
    )
    after = [t for t in commits(a_link.txn_log()) if t.forwarded_at > healed_at]
    before_rejoin = [t for t in after if t.forwarded_at < rejoined_at]
    stale = [t for t in after if (t.producer_id, t.epoch) in before]
    zombie_commits = [t for t in before_rejoin + stale if t.error == 0]
    print(
        f"\nF9 ({direction}): A's transactional ids {sorted(a_ids)}, taken over by B during "
        f"the cut {sorted(taken_over)}; A rejoined {rejoined_at - healed_at:.1f}s after the "
        f"heal; A's commits after the heal: {len(after)}, {len(before_rejoin)} before it "
        f"rejoined (answers {[t.error for t in before_rejoin]}), {len(stale)} of pre-cut "
        f"producers (answers {[t.error for t in stale]}); " + proxy_line(links)
    )
    record(
        reliability,
        "F9 worker partitioned from the broker past session and transaction timeouts "
        "(both directions; from the broker only; held mid-commit, delivered after the heal)",
        len(stream.records),
        1,
        report,
        waited,
    )
    assert a_ids <= taken_over, "B did not take every partition of A over during the cut"
    assert zombie_commits == [], f"A committed after the heal without owning: {zombie_commits}"
    if direction == "held":  # the held commit reached the broker after the heal, refused
        assert stale and all(t.error for t in stale), stale


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
    feeder.join()
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


def test_f15_a_transaction_the_broker_aborts_on_its_timeout(
    net: Net, links: list[Link], names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """The worker is stopped (SIGSTOP) with a transaction open on the broker, for 3x its
    transaction timeout (2 s here), and stays in the group (60 s session), so nobody takes
    over: the broker aborts the transaction on ``transaction.timeout.ms`` and bumps the
    producer's epoch. After SIGCONT the worker must find its transaction gone (fenced), drop
    what it held and read those records again. Three stops while the stream flows.

    The worker's transactions are open on the broker only while it commits (records wait in
    the task's batches until the commit, ``app/eos/collector.py``), a few ms every 500 ms, so
    a stop at a random moment almost never meets one: the proxy stops the worker when it sees
    the commit's ``AddPartitionsToTxn`` go to the broker (which opens the transaction there)."""
    worker = proxied(
        net,
        names,
        workers,
        0,
        DEDUPE_TRANSACTION_TIMEOUT="2s",
        DEDUPE_SESSION_TIMEOUT="60s",
        DEDUPE_COMMIT_INTERVAL="500ms",
    )
    assert worker.proc is not None
    pid = worker.proc.pid
    stopped = threading.Event()
    armed = threading.Event()

    def on_request(api_key: int, txn: TxnRequest | None) -> Action:
        if api_key == ADD_PARTITIONS_TO_TXN and armed.is_set():
            armed.clear()
            os.kill(pid, signal.SIGSTOP)  # the request still goes on: the broker opens the txn
            stopped.set()
        return None

    links[0].on_request = on_request
    stream = scaled_stream(15_000, seed=15)
    feeder = Feeder(net.broker, names, stream, seconds=30)
    stops = 0
    for _ in range(3):
        time.sleep(3)
        feeder.assert_flowing()
        stopped.clear()
        armed.set()
        assert stopped.wait(30), "no commit came to stop the worker in"
        time.sleep(6)  # 3x the transaction timeout; the broker checks every second
        os.kill(pid, signal.SIGCONT)
        stops += 1
    feeder.join()
    report, waited = drain_and_verify(net.broker, names, workers)
    log_text = worker.log_text()
    fenced = log_text.count("was fenced")
    print(f"\nF15: {stops} stops; 'was fenced' logged {fenced} times; " + proxy_line(links))
    record(
        reliability,
        "F15 transaction aborted by the broker on its timeout while the worker is stopped "
        "mid-commit (SIGSTOP 3x the 2 s timeout, x3)",
        len(stream.records),
        stops,
        report,
        waited,
    )
    assert fenced >= stops, log_text[-4000:]


def test_f18_ingest_link_cut_while_the_sdk_retries(
    net: Net,
    links: list[Link],
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    tmp_path: Path,
) -> None:
    """The ingest service's link to Kafka is cut (both directions) for 8 s, twice, while the
    official Segment SDK sends 4,000 events: requests answer 503 after the 2 s ack timeout,
    the SDK retries them, and every event comes out of the (unproxied) worker exactly once."""
    worker = Worker(net.broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    service = IngestProcess(
        net.via(2),
        names.input_topic,
        tmp_path / "ingest.log",
        extra_env={"DEDUPE_INGEST_ACK_TIMEOUT": "2s"},
    )
    service.start()
    service.wait_ready()
    sent: list[str] = []
    cuts: list[tuple[float, float]] = [(3.0, 11.0), (16.0, 24.0)]  # seconds into the feed
    events = 4_000 * SCALE
    per_second = events / 28
    started = time.monotonic()
    errors: list[Any] = []
    client = Client(
        WRITE_KEY,
        host=service.url,
        upload_size=50,
        max_queue_size=events + 1,  # the queue grows during the cuts (40,000 events at 10x)
        on_error=lambda error, batch: errors.append(error),
    )
    try:
        for i in range(events):
            now = time.monotonic() - started
            cut = any(a <= now < b for a, b in cuts)
            if cut and not links[2].is_cut:
                links[2].cut("both")
            elif not cut and links[2].is_cut:
                links[2].heal()
            ok, msg = client.track(f"user-{i % 50}", "Product Viewed", {"n": i})
            assert ok
            sent.append(msg["messageId"])
            time.sleep(max(0.0, (i + 1) / per_second - (time.monotonic() - started)))
        links[2].heal()
        client.flush()
    finally:
        links[2].heal()  # also after a failure: a shutdown with the link cut never ends
        client.shutdown()
        service.stop()
    assert errors == []
    log_text = service.log_text()
    written = records_in(net.broker, names.input_topic)
    answered_503 = log_text.count("-> 503 kafka_unavailable")
    report, waited = drain_and_verify(net.broker, names, [worker])
    clean = asyncio.run(read_topic(net.broker.bootstrap, names.output_topic))
    print(
        f"\nF18: {len(cuts)} cuts of 8 s, input topic {written:,} records for {len(sent):,} events "
        f"({written - len(sent)} written again), 503s logged: {answered_503}; " + proxy_line(links)
    )
    record(
        reliability,
        "F18 ingest service's link to Kafka cut (8 s, x2) while the Segment SDK retries",
        written,
        len(cuts),
        report,
        waited,
    )
    assert len(set(sent)) == len(sent)
    assert sorted(r.key or b"" for r in clean) == sorted(m.encode() for m in sent)
    assert answered_503 > 0, "no request met the cut"
