"""F9: a worker partitioned from the broker (both directions, one direction only, or held and
delivered late) is fenced and commits nothing after the heal; exactly once at the end."""

from __future__ import annotations

import threading
import time

import pytest

from tests.faults.conftest import SCALE, Reliability
from tests.faults.kafka_frames import (
    END_TXN,
    INIT_PRODUCER_ID,
    SYNC_GROUP,
    TxnRequest,
)
from tests.faults.network.support import (
    SESSION_TIMEOUT,
    TRANSACTION_TIMEOUT,
    Net,
    commits,
    proxied,
    proxy_line,
)
from tests.faults.proxy import Link
from tests.faults.proxy_conn import Action
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.support import Names
from tests.workers import Worker

pytestmark = pytest.mark.faults


#: "both", "from-broker" (A's requests still reach the broker, it hears nothing back),
#: "to-broker", and "held": both directions held from the moment A sends a commit, everything
#: delivered after the heal (A's commit reaches the broker after B took A's partitions over).
#: "to-broker" behaves as "both" for the broker; it runs at DEDUPE_FAULT_SCALE > 1 only.
DIRECTIONS = ["both", "from-broker", "held"] + (["to-broker"] if SCALE > 1 else [])


@pytest.mark.parametrize("direction", DIRECTIONS)
@pytest.mark.both_protocols
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
    feeder.finish()
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
