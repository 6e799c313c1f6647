"""F15: a transaction the broker aborts on its timeout while the worker is stopped; exactly once
at the end."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.faults.conftest import Reliability
from tests.faults.kafka_frames import (
    ADD_PARTITIONS_TO_TXN,
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
def test_f15_a_transaction_the_broker_aborts_on_its_timeout(
    net: Net,
    links: list[Link],
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    protocol: str,
) -> None:
    """The worker is stopped (SIGSTOP) with a transaction open on the broker, for 3x its
    transaction timeout (2 s here), and stays in the group (60 s session), so nobody takes
    over: the broker aborts the transaction on ``transaction.timeout.ms`` and bumps the
    producer's epoch. After SIGCONT the worker must find its transaction gone (fenced), drop
    what it held and read those records again. Three stops while the stream flows.

    The worker's transactions are open on the broker only while it commits (records wait in
    the task's batches until the commit, ``app/eos/collector.py``), a few ms every 500 ms, so
    a stop at a random moment almost never meets one: the proxy stops the worker when it sees
    the request that opens the transaction on the broker go by: the commit's
    ``AddPartitionsToTxn`` (v1), or its first ``Produce`` (v2, where the partition's leader
    adds the partition)."""
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

    opens = ADD_PARTITIONS_TO_TXN if protocol == "v1" else PRODUCE

    def on_request(api_key: int, txn: TxnRequest | None) -> Action:
        if api_key == opens and armed.is_set():
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
    feeder.finish()
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
