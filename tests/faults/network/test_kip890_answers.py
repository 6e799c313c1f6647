"""Transactions v2's own answers, injected into a flowing stream by the fault proxy, each ending
exactly once (fault rows F26, F26a, F26b, F27; transactions v2 only: the old protocol's broker
never sends them).

The proxy rewrites the error code of a real answer (``Link.fail_next``), so the client sees what
a Kafka 4.x broker sends when it asks for an abort (TRANSACTION_ABORTABLE, KIP-890) or when the
previous transaction's markers are still being written (CONCURRENT_TRANSACTIONS); it resets a
connection right after an EndTxn reached the broker, so the commit is done and its answer lost.
What the worker must do is what the Java client's ``TransactionManager`` does: abort (and end the
broker's transaction with EndTxn(abort): the proxy's log shows it), retry, or learn the epoch
the coordinator bumped to.

How to run: part of ``make test-faults``; each test adds its row to docs/reliability.md.
"""

from __future__ import annotations

import time

import pytest

from tests.faults.conftest import Reliability
from tests.faults.kafka_frames import (
    CONCURRENT_TRANSACTIONS,
    END_TXN,
    INIT_PRODUCER_ID,
    PRODUCE,
    TXN_OFFSET_COMMIT,
    TxnRequest,
)
from tests.faults.network.support import Net, proxied, proxy_line
from tests.faults.proxy import Link
from tests.faults.proxy_conn import Action
from tests.faults.scenario import Feeder, drain_and_verify, record, scaled_stream
from tests.support import Names
from tests.workers import Worker

pytestmark = [pytest.mark.faults, pytest.mark.v2_only]

TRANSACTION_ABORTABLE, COORDINATOR_LOAD_IN_PROGRESS = 120, 14
#: The answers to an EndTxn the client sends again (the Java client's ``EndTxnHandler``); None:
#: no answer came (the connection went).
RETRIED_END_TXN = {CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS, None}
#: Answers rewritten per row, a few seconds apart, while the stream flows.
INJECTIONS = 3


def inject_while_flowing(link: Link, feeder: Feeder, api_key: int, error: int, times: int) -> int:
    """Rewrite the next answer to ``api_key`` ``times`` times, one at a time, 2 s apart, while
    the stream flows; returns how many were rewritten."""
    done = 0
    time.sleep(3)
    for _ in range(times):
        feeder.assert_flowing()
        link.fail_next(api_key, error)
        deadline = time.monotonic() + 30
        while link.failing() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not link.failing(), f"no answer to API {api_key} came in 30 s"
        done += 1
        time.sleep(2)
    return done


def aborts(link: Link) -> list[TxnRequest]:
    """The EndTxn(abort) requests the broker answered with success."""
    return [t for t in link.txn_log() if t.api_key == END_TXN and not t.committed and t.error == 0]


@pytest.mark.parametrize(
    ("api_key", "fault"),
    [
        (TXN_OFFSET_COMMIT, "F26 TRANSACTION_ABORTABLE on TxnOffsetCommit (x3, rewritten answers)"),
        (PRODUCE, "F26a TRANSACTION_ABORTABLE on Produce (x3, rewritten answers)"),
    ],
    ids=["txn-offset-commit", "produce"],
)
def test_a_transaction_the_broker_asks_to_abort_is_aborted_on_the_broker(
    net: Net,
    links: list[Link],
    names: Names,
    workers: list[Worker],
    reliability: Reliability,
    api_key: int,
    fault: str,
) -> None:
    """TRANSACTION_ABORTABLE on the offsets or on a record batch: the transaction cannot
    commit. The worker aborts it, and the abort reaches the broker as EndTxn(abort): before,
    an abort after an abortable offset commit ended locally (aiokafka had forgotten the
    partitions), leaving the broker's transaction open."""
    link = links[0]
    proxied(net, names, workers, 0)
    stream = scaled_stream(10_000, seed=126 + api_key)
    feeder = Feeder(net.broker, names, stream, seconds=15)
    injected = inject_while_flowing(link, feeder, api_key, TRANSACTION_ABORTABLE, INJECTIONS)
    feeder.finish()
    report, waited = drain_and_verify(net.broker, names, workers)
    log = workers[0].log_text()
    print(
        f"\n{fault.split()[0]}: rewritten {link.rewritten}; EndTxn(abort) answered "
        f"{len(aborts(link))}; 'TransactionAbortable' in the log "
        f"{log.count('TransactionAbortable')}; " + proxy_line(links)
    )
    record(reliability, fault, len(stream.records), injected, report, waited)
    assert len(aborts(link)) >= injected, "a transaction the broker refused was not ended"
    assert log.count("TransactionAbortable") >= injected


def test_concurrent_transactions_on_the_offset_commit_is_retried(
    net: Net, links: list[Link], names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """CONCURRENT_TRANSACTIONS on TxnOffsetCommit (the previous transaction's markers are still
    being written): the producer retries it and the transaction commits, twice in a row each
    time. Before, aiokafka raised it in its sender task, which ended the producer: the
    transaction failed and the partition was re-read."""
    link = links[0]
    proxied(net, names, workers, 0)
    stream = scaled_stream(10_000, seed=151)
    feeder = Feeder(net.broker, names, stream, seconds=25)
    injected = inject_while_flowing(link, feeder, TXN_OFFSET_COMMIT, CONCURRENT_TRANSACTIONS, 6)
    feeder.finish()
    report, waited = drain_and_verify(net.broker, names, workers)
    log = workers[0].log_text()
    print(f"\nF26b: rewritten {len(link.rewritten)}; " + proxy_line(links))
    record(
        reliability,
        "F26b CONCURRENT_TRANSACTIONS on TxnOffsetCommit (x6, rewritten answers)",
        len(stream.records),
        injected,
        report,
        waited,
    )
    for failure in ("transaction failed", "recreating producer", "Unexpected error"):
        assert failure not in log, f"{failure!r} in the worker's log"
    assert aborts(link) == []


def test_an_end_whose_answer_is_lost_is_learned_from_the_retry(
    net: Net, links: list[Link], names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    """EndTxn(commit) reaches the coordinator, which commits and bumps the epoch, and the
    connection is reset before its answer comes back. The producer sends it again; the
    coordinator answers the retry with the bumped epoch (``retryOnEpochBump``), and the next
    transaction runs on it. If the retry came too late, the worker would have replaced its
    producer (InitProducerId) and asked the group what committed: either way the producer never
    goes on with the old epoch.

    A retry that reaches the coordinator while the commit's markers are still being written is
    answered CONCURRENT_TRANSACTIONS (``TransactionCoordinator.endTransaction``: PrepareCommit),
    and the client sends it again (the Java client's ``EndTxnHandler`` re-enqueues it). This
    test's first check failed once in a loaded CI run: it took any error answer to a retry on
    the old epoch for a commit going on with that epoch, and that answer is the one a retry gets
    when it comes early (the run's output cut off the codes). The race is now driven: the first
    retry of every second lost answer is given CONCURRENT_TRANSACTIONS by the proxy (the broker,
    answering the retry of a done commit, changes nothing), so both orders run every time; each
    retry must be answered so or succeed, and the producer must send it again until it learns."""
    resets: list[TxnRequest] = []
    concurrent = {1, 3}  # which lost answers' first retry comes "while the markers are written"
    retries: dict[tuple[str, int, int], int] = {}
    seen = {"commits": 0}

    def on_request(api_key: int, txn: TxnRequest | None) -> Action:
        if api_key != END_TXN or txn is None or not txn.committed:
            return None
        key = _commit_key(txn)
        lost = next((n for n, r in enumerate(resets) if key == _commit_key(r)), None)
        if lost is not None:  # the retry of a commit whose answer was lost: let it through
            retries[key] = retries.get(key, 0) + 1
            return "concurrent" if lost in concurrent and retries[key] == 1 else None
        if len(resets) < 4:
            seen["commits"] += 1
            if seen["commits"] % 5 == 0:
                resets.append(txn)
                return "reset-after"
        return None

    link = links[0]
    link.on_request = on_request
    proxied(net, names, workers, 0, DEDUPE_COMMIT_TIMEOUT="10s")
    stream = scaled_stream(10_000, seed=127)
    Feeder(net.broker, names, stream, seconds=12).join()
    report, waited = drain_and_verify(net.broker, names, workers)
    log = link.txn_log()
    learned = replaced = learned_after_concurrent = 0
    for n, t in enumerate(resets):
        later = [r for r in log[log.index(t) + 1 :] if r.transactional_id == t.transactional_id]
        ends = [r for r in later if r.api_key == END_TXN]
        old = [r for r in ends if _commit_key(r) == _commit_key(t)]
        answers = [r.error for r in old]
        assert all(r.committed for r in old), f"an abort on the lost commit's epoch: {answers}"
        done = answers.index(0) if 0 in answers else None
        if done is None:
            # No retry learned the outcome: the producer must have been replaced.
            assert any(r.api_key == INIT_PRODUCER_ID for r in later), (
                f"the lost commit of {t.transactional_id} (epoch {t.epoch}) was neither learned "
                f"nor its producer replaced; retries answered {answers}"
            )
            replaced += 1
            continue
        assert set(answers[:done]) <= RETRIED_END_TXN, (
            f"a retry of the lost commit answered {answers[:done]} before it was learned"
        )
        assert answers[done + 1 :] == [], (
            f"an EndTxn of {t.transactional_id} went on with the old epoch {t.epoch}: {answers}"
        )
        after = ends[ends.index(old[done]) + 1 :]
        if after and (after[0].producer_id, after[0].epoch) == (t.producer_id, t.epoch + 1):
            learned += 1
            learned_after_concurrent += n in concurrent and answers[0] == CONCURRENT_TRANSACTIONS
    print(
        f"\nF27: answers lost {len(resets)}; the next commit on the learned epoch {learned} "
        f"({learned_after_concurrent} after a CONCURRENT_TRANSACTIONS retry), producer replaced "
        f"{replaced}; " + proxy_line(links)
    )
    record(
        reliability,
        "F27 EndTxn done, its answer lost (connection reset, x4): the retry learns the epoch "
        "the coordinator bumped to",
        len(stream.records),
        len(resets),
        report,
        waited,
    )
    assert len(resets) == 4, f"only {len(resets)} commits met the fault"
    assert learned + replaced == len(resets)
    assert learned >= 1, "no producer went on with the epoch its lost commit bumped to"
    assert learned_after_concurrent == len(concurrent), (
        "a retry answered CONCURRENT_TRANSACTIONS was not sent again until it learned the epoch"
    )


def _commit_key(txn: TxnRequest) -> tuple[str, int, int]:
    return txn.transactional_id, txn.producer_id, txn.epoch
