"""``DEDUPE_WINDOW_FROM`` on the real broker: per source, a repeat re-arms the id's window
(``last_seen``) or not (``first_seen``); the re-armed ids age out a window after their last
sighting, and a worker rebuilt from the changelog holds the same ids, ages and counts."""

from __future__ import annotations

import asyncio
import json
import shutil
import signal

import pytest
from aiokafka import AIOKafkaProducer

from tables.window import Entry
from tests.integration.test_age_out import T0, output, start, stats, store_state
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.integration

Send = tuple[str, int, str]  # (messageId, record timestamp ms, source)


async def send(bootstrap: str, topic: str, records: list[Send]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=5)
    await producer.start()
    try:
        futures = []
        for mid, ts, source in records:
            body = json.dumps({"type": "track", "event": "Poll", "messageId": mid}).encode()
            headers = [("dedupe.source", source.encode())]
            futures.append(
                await producer.send(
                    topic, body, key=mid.encode(), timestamp_ms=ts, partition=0, headers=headers
                )
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


def feed(broker: Broker, names: Names, workers: list[Worker], records: list[Send]) -> None:
    asyncio.run(send(broker.bootstrap, names.input_topic, records))
    wait_drained(broker, names, timeout=300, workers=workers)


def test_last_seen_per_source_re_arms_ages_out_and_rebuilds_identically(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = start(
        broker,
        names,
        workers,
        DEDUPE_WINDOW="20s",
        DEDUPE_BUCKET="1s",
        DEDUPE_ALLOWED_LATENESS="0",
        DEDUPE_SOURCE_WINDOW_FROM="poller=last_seen",
        DEDUPE_COUNT_REPEATS="true",
    )
    records: list[Send] = []
    for t in range(0, 131):  # one record time per second, T0 .. T0 + 130 s
        ms = T0 + 1000 * t
        records.append((f"tick-{t}", ms, "web"))  # drives stream time and age-out
        if t % 15 == 0 and t <= 120:  # both ids repeat every 15 s, inside a 20 s window
            records.append(("poll-1", ms, "poller"))
            records.append(("hook-1", ms, "web"))
    feed(broker, names, workers, records)
    # Age-out reaches committed ids only: copies of the last tick, sent once the rest committed,
    # drive it through everything out of the window.
    feed(broker, names, workers, [("tick-130", T0 + 130_000, "web")] * 10)
    out = output(broker, names.output_topic)
    # poller (last_seen): every repeat re-arms, so only the first copy is forwarded.
    assert [ts for k, ts in out if k == b"poll-1"] == [T0]
    # web (first_seen): a copy 20 s or more after the forwarded one starts a new window.
    assert [ts for k, ts in out if k == b"hook-1"] == [T0 + 1000 * t for t in (0, 30, 60, 90, 120)]
    # Ticks 110..130 (bucket 109 ends at 130 s - W), and both ids.
    assert stats(worker)["ids_held"] == 21 + 2

    worker.kill(signal.SIGTERM)
    live = store_state(worker.data_dir)
    poll = Entry.decode(live[0][b"poll-1"])
    assert poll.first_seen_ms == T0 + 120_000 and poll.repeats == 8
    assert sum(live[1].values()) == len(live[0])  # each id counted once: the moves left none
    shutil.rmtree(worker.data_dir)  # rebuild everything from the changelog
    worker.start()
    worker.wait_ready()
    worker.kill(signal.SIGTERM)
    rebuilt = store_state(worker.data_dir)
    assert rebuilt == live  # the same ids, ages, counts and summary
    worker.start()
    worker.wait_ready()
    # The rebuilt worker judges by the re-armed clock: 19.999 s after the last sighting a
    # repeat, 20 s after it (the next copy, a window after the one before) a first sighting.
    feed(
        broker,
        names,
        workers,
        [("poll-1", T0 + 139_999, "poller"), ("poll-1", T0 + 159_999, "poller")],
    )
    assert [ts for k, ts in output(broker, names.output_topic) if k == b"poll-1"] == [
        T0,
        T0 + 159_999,
    ]
