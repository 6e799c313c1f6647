"""The verifier is itself tested: broken workers must fail it, the real worker must pass it."""

from __future__ import annotations

import asyncio

import pytest

from app.admin.topics import ensure_topics
from app.settings import Settings
from scripts.streams import build_stream, produce
from scripts.verify import verify_pipeline
from tables.seen_ids.table import changelog_topic_name
from tests.faults.broken_workers import forward_every_copy, offsets_before_send
from tests.support import Broker, Names
from tests.workers import Worker, wait_drained

pytestmark = pytest.mark.faults


def settings_for(broker: Broker, names: Names, app_id: str, out: str, dlq: str) -> Settings:
    """Settings of a pipeline on the shared input; its topics are created like the worker does."""
    settings = Settings.from_env(
        {
            "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
            "DEDUPE_APP_ID": app_id,
            "DEDUPE_INPUT_TOPIC": names.input_topic,
            "DEDUPE_OUTPUT_TOPIC": out,
            "DEDUPE_DLQ_TOPIC": dlq,
            "DEDUPE_PARTITIONS": "4",
        }
    )
    asyncio.run(ensure_topics(settings, changelog_topic_name(settings)))
    return settings


def test_broken_workers_fail_the_verifier_and_the_real_one_passes(
    broker: Broker, names: Names, workers: list[Worker]
) -> None:
    worker = Worker(broker, names, partitions=4)  # creates the topics; the positive control
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    stream = build_stream(3_000, 0.1, seed=17, kinds=(0.5, 0.5, 0.0))
    asyncio.run(produce(broker.bootstrap, names.input_topic, stream.records))
    wait_drained(broker, names, timeout=180, workers=workers)

    good = asyncio.run(
        verify_pipeline(
            settings_for(broker, names, names.app_id, names.output_topic, names.dlq_topic),
            first_copy=True,
        )
    )
    assert good.ok, "\n".join(good.lines())

    every = settings_for(
        broker,
        names,
        f"{names.app_id}-every",
        f"{names.output_topic}-every",
        f"{names.dlq_topic}-every",
    )
    asyncio.run(
        forward_every_copy(
            broker.bootstrap, names.input_topic, every.output_topic, every.dlq_topic, every.app_id
        )
    )
    report = asyncio.run(verify_pipeline(every, check_transactions=False))
    assert not report.ok
    assert report.clean.duplicates == stream.duplicates

    early = settings_for(
        broker,
        names,
        f"{names.app_id}-early",
        f"{names.output_topic}-early",
        f"{names.dlq_topic}-early",
    )
    for crash_after in (3, 0):  # one crashing run, then one that finishes (0: never crashes)
        asyncio.run(
            offsets_before_send(
                broker.bootstrap,
                names.input_topic,
                early.output_topic,
                early.dlq_topic,
                early.app_id,
                crash_after,
            )
        )
    report = asyncio.run(verify_pipeline(early, check_transactions=False))
    assert not report.ok
    assert report.clean.missing > 0 and not report.unprocessed
