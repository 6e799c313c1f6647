"""The transaction protocol on real brokers (app/eos/txn_protocol.py): the finalized
``transaction.version`` read from ApiVersions v3+ on a broker formatted with Kafka's defaults (2)
and one formatted with ``transaction.version=1``; a worker says which protocol runs (start-up
log, ``/stats``) and refuses ``DEDUPE_TRANSACTION_PROTOCOL=v2`` while it cannot run it."""

from __future__ import annotations

import asyncio
import time

import pytest

from app.eos.txn_protocol import V2_SUPPORTED, cluster_features, detect
from app.settings import Settings
from tests.support import Broker, Names, Worker, get

pytestmark = pytest.mark.integration


def settings_for(broker: Broker, protocol: str = "auto") -> Settings:
    return Settings.from_env(
        {"KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap, "DEDUPE_TRANSACTION_PROTOCOL": protocol}
    )


def test_the_finalized_transaction_version_is_read(tv2_broker: Broker, tv1_broker: Broker) -> None:
    on_v2 = asyncio.run(cluster_features(settings_for(tv2_broker)))
    on_v1 = asyncio.run(cluster_features(settings_for(tv1_broker)))
    assert on_v2.levels["transaction.version"] == 2
    assert on_v2.transaction_version == 2
    assert on_v1.levels["transaction.version"] == 1
    assert on_v1.transaction_version == 1
    # Both report a known features epoch and other finalized features (the metadata version).
    assert on_v2.epoch >= 0 and on_v1.epoch >= 0
    assert on_v2.levels["metadata.version"] > 0 and on_v1.levels["metadata.version"] > 0

    chosen = asyncio.run(detect(settings_for(tv2_broker)))
    assert chosen.cluster_transaction_version == 2
    assert chosen.running == ("v2" if V2_SUPPORTED else "v1")
    assert asyncio.run(detect(settings_for(tv1_broker))).running == "v1"
    assert asyncio.run(detect(settings_for(tv2_broker, "v1"))).running == "v1"


def wait_stats(worker: Worker, timeout: float = 60) -> dict[str, object]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, body = get(worker, "/stats")
        if status == 200:
            return dict(body)
        time.sleep(0.5)
    raise AssertionError(f"no /stats after {timeout}s:\n{worker.log_text()[-4000:]}")


def test_a_worker_says_which_protocol_runs(tv2_broker: Broker, names: Names) -> None:
    auto = Worker(tv2_broker, names, index=0, partitions=2)
    forced = Worker(
        tv2_broker, names, index=1, partitions=2, extra_env={"DEDUPE_TRANSACTION_PROTOCOL": "v2"}
    )
    try:
        auto.start()
        auto.wait_ready()
        running = "v2" if V2_SUPPORTED else "v1"
        assert wait_stats(auto)["transactions"] == {
            "protocol": running,
            "setting": "auto",
            "cluster_transaction_version": 2,
        }
        assert (
            f"transactions run protocol {running} (DEDUPE_TRANSACTION_PROTOCOL=auto: chosen from "
            "what the cluster finalized); the cluster finalized transaction.version=2"
        ) in auto.log_text()

        forced.start()
        if V2_SUPPORTED:
            forced.wait_ready()
            assert wait_stats(forced)["transactions"] == {
                "protocol": "v2",
                "setting": "v2",
                "cluster_transaction_version": 2,
            }
        else:
            assert forced.proc is not None
            assert forced.proc.wait(timeout=120) != 0
            assert "DEDUPE_TRANSACTION_PROTOCOL=v2, but this worker does not run" in (
                forced.log_text()
            )
    finally:
        auto.kill()
        forced.kill()
