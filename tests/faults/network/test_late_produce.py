"""F29: the hazard KIP-890 closes, driven through the worker's own transactional producer
(``app/eos/producer.py``'s, on the transactions-v2 flow of ``app/eos/txn_v2.py``), on the real
broker; C9 (tests/cluster) shows it with hand-built requests.

Transaction N writes partition A and partition B. The fault proxy holds N's Produce request to
A in the network; the producer's request times out, its connection is closed, and it sends the
batch again on a new connection, which goes through: N holds A's record once, and B's. N ends
(aborted in one run, committed in the other). Transaction N+1 writes A again (after an abort a
stream processor redoes N's work) and B, and only then does the proxy deliver N's first
request, long after its transaction ended, while N+1 is open on both partitions.

Under v2 every EndTxn bumps the epoch, so the late request carries an old one and the broker
refuses it; read_committed then holds exactly the committed transactions' records, and no
transaction is left open.

How to run: part of ``make test-faults`` (the soak runs it on v1 too); adds the row "F29"
(aborted N and committed N: two runs) to docs/reliability.md.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from typing import Any

import pytest

from app.eos.producer import TransactionalProducers
from app.eos.txn_protocol import detect
from scripts.topic_admin import create_topics
from scripts.topic_reader import read_topic, settled_ends
from tests.faults.conftest import Reliability
from tests.faults.kafka_frames import PRODUCE
from tests.faults.network.support import Net
from tests.faults.proxy import Link
from tests.faults.scenario import settings_of
from tests.support import Names

pytestmark = pytest.mark.faults

A, B = 0, 1
#: The producer's request timeout (DEDUPE_COMMIT_TIMEOUT caps it): the held request times out
#: after this, and the producer sends the batch again.
REQUEST_TIMEOUT = 3


async def transactions(net: Net, link: Link, names: Names, protocol: str, commit_n: bool) -> Any:
    settings = settings_of(
        net.via(0),
        names,
        2,
        {"DEDUPE_TRANSACTION_PROTOCOL": protocol, "DEDUPE_COMMIT_TIMEOUT": f"{REQUEST_TIMEOUT}s"},
    )
    topic = names.output_topic
    await create_topics(net.broker.bootstrap, [topic], 2)
    producers = TransactionalProducers(settings, lambda: False)
    producers.use_protocol(await detect(settings))
    producer = await producers.start(0)
    try:
        # Transaction N: A's first request is held in the network; the retry goes through.
        await producer.begin_transaction()
        link.hold_next(PRODUCE)
        n_a = await producer.send(topic, b"n-A", key=b"n-A", partition=A)
        n_b = await producer.send(topic, b"n-B", key=b"n-B", partition=B)
        await asyncio.wait_for(asyncio.gather(n_a, n_b), 6 * REQUEST_TIMEOUT)
        held = link.held
        assert held is not None and held.forwarded_at == 0, "no request of N was held"
        if commit_n:
            await producer.commit_transaction()
        else:
            await producer.abort_transaction()
        # Transaction N+1, open on A and B when N's first request reaches the broker.
        await producer.begin_transaction()
        redo = b"n-A" if not commit_n else b"n1-A"
        await (await producer.send(topic, redo, key=redo, partition=A))
        await (await producer.send(topic, b"n1-B", key=b"n1-B", partition=B))
        link.release()
        deadline = time.monotonic() + 30
        # The proxy answers on its own thread: polled.
        while held.answer is None and time.monotonic() < deadline:  # noqa: ASYNC110
            await asyncio.sleep(0.05)
        await producer.commit_transaction()
    finally:
        link.release()
        await producers.close(producer)
    ends = await settled_ends(net.broker.bootstrap, topic)
    records = await read_topic(net.broker.bootstrap, topic)
    return held, ends, sorted((r.partition, r.value) for r in records)


@pytest.mark.parametrize("commit_n", [False, True], ids=["n-aborted", "n-committed"])
def test_a_produce_of_a_transaction_delivered_after_it_ended_is_refused(
    net: Net,
    links: list[Link],
    names: Names,
    reliability: Reliability,
    protocol: str,
    commit_n: bool,
) -> None:
    link = links[0]
    started = time.monotonic()
    held, ends, seen = asyncio.run(transactions(net, link, names, protocol, commit_n))
    expected = (
        [(A, b"n-A"), (A, b"n1-A"), (B, b"n-B"), (B, b"n1-B")]
        if commit_n
        else [(A, b"n-A"), (B, b"n1-B")]
    )
    # What read_committed holds beyond the committed transactions' records (a late copy
    # taken), and what it lacks.
    extra, lacking = Counter(seen) - Counter(expected), Counter(expected) - Counter(seen)
    print(
        f"\nF29 {protocol} N {'committed' if commit_n else 'aborted'}: held {held}; "
        f"read_committed {seen}; ends {ends}"
    )
    reliability.record(
        "F29 a Produce of transaction N held in the network past N's end, the producer's retry "
        "through; N+1 open on its partitions when it arrives (N aborted; N committed)",
        events=len(expected),
        injected=1,
        duplicates=sum(extra.values()),
        missing=sum(lacking.values()),
        recover_s=time.monotonic() - started,
    )
    assert held.client_gone, "the producer had not given up on the held request"
    assert held.answer is not None, "the held request was never answered"
    if protocol == "v2":
        assert held.answer and all(held.answer), f"the late request was taken: {held.answer}"
    assert seen == expected
