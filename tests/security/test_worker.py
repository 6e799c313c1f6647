"""The worker on the secured broker, as its own principal (User:dedupe-worker) with only the ACLs
of ``scripts.kafka_acls``: every event once, the password nowhere in its log or endpoints, and
kill -9 at random moments still exactly once (the fault tier's F1 over SASL_SSL)."""

from __future__ import annotations

import asyncio
import random
import signal
import time

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from app.admin.topics import topic_specs
from scripts.kafka_acls import changelogs, leader_topic_name
from scripts.streams import build_stream, produce
from scripts.verify import verify_pipeline
from tests.faults.scenario import Feeder
from tests.security.conftest import SecureBroker, worker_as
from tests.support import Names
from tests.workers import Worker, drained, get, wait_drained


def test_worker_dedups_as_its_own_principal_and_never_shows_its_password(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    secure.grant(names)
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    stream = build_stream(3_000, 0.1, seed=25)
    # The input is written as the ingest service's principal (Write on the input topic only).
    sent = asyncio.run(
        produce(
            secure.broker.bootstrap,
            names.input_topic,
            stream.records,
            client=secure.client("dedupe-ingest"),
        )
    )
    assert sent == len(stream.records)
    admin = secure.admin(names)
    wait_drained(secure.broker, names, 120, workers, admin.kafka_client_kwargs())
    report = asyncio.run(verify_pipeline(admin, first_copy=True))
    print("\n" + " | ".join(report.lines()))
    assert report.ok, "\n".join(report.lines())
    assert report.clean.total == len(stream.unique)
    assert report.open_transactions == [], "the transactions check must run, as admin"

    password = secure.password_of("dedupe-worker")
    for path in ("/stats", "/metrics", f"/messages/{next(iter(stream.unique))}"):
        status, body = get(worker, path)
        assert status == 200, (path, status, body)
        assert password not in str(body), path
    worker.kill(signal.SIGTERM)
    assert password not in worker.log_text()


def test_kill_9_over_sasl_ssl_is_exactly_once(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    rng = random.Random(2025)
    secure.grant(names)
    admin = secure.admin(names).kafka_client_kwargs()
    stream = build_stream(20_000, 0.1, seed=26)
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    feeder = Feeder(secure.broker, names, stream, seconds=15, client=secure.client("dedupe-ingest"))
    kills = busy = 0
    started = time.monotonic()
    while kills < 3:
        time.sleep(rng.uniform(2.0, 4.0))
        busy += not asyncio.run(drained(secure.broker, names, admin))
        worker.kill(signal.SIGKILL)
        kills += 1
        worker.start()
    assert feeder.join() == len(stream.records)
    waited = wait_drained(secure.broker, names, 300, workers, admin)
    report = asyncio.run(verify_pipeline(secure.admin(names), first_copy=True))
    print(
        f"\nSASL_SSL kill -9 x{kills} (mid-stream {busy}), events={len(stream.records)} "
        f"unique={len(stream.unique)} duplicates={report.clean.duplicates} "
        f"missing={report.clean.missing} elapsed={time.monotonic() - started:.0f}s "
        f"drain_after_last_restart={waited:.0f}s\n" + " | ".join(report.lines())
    )
    assert busy >= 2, "the kills must hit a worker that still had work"
    assert report.ok, "\n".join(report.lines())
    assert (report.clean.duplicates, report.clean.missing) == (0, 0)


async def create_topics_as_admin(secure: SecureBroker, names: Names) -> None:
    """What an operator does before a worker without Create starts: every topic of
    app/admin/topics.py with its configs, and Faust's one-partition leader topic."""
    admin_settings = secure.admin(names)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=secure.broker.bootstrap, **admin_settings.kafka_client_kwargs()
    )
    await admin.start()
    try:
        seen_ids, *more = changelogs(admin_settings)
        specs = topic_specs(admin_settings, seen_ids, more)
        await admin.create_topics(
            [NewTopic(s.name, 4, 1, topic_configs=s.config) for s in specs]
            + [NewTopic(leader_topic_name(admin_settings), 1, 1)]
        )
    finally:
        await admin.close()


def test_worker_without_create_runs_on_topics_an_operator_created(
    secure: SecureBroker, names: Names, workers: list[Worker]
) -> None:
    secure.grant(names, create=False)
    asyncio.run(create_topics_as_admin(secure, names))
    worker = worker_as(secure, names, "dedupe-worker")
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    stream = build_stream(500, 0.1, seed=27)
    produce_as_ingest = produce(
        secure.broker.bootstrap,
        names.input_topic,
        stream.records,
        client=secure.client("dedupe-ingest"),
    )
    assert asyncio.run(produce_as_ingest) == len(stream.records)
    admin = secure.admin(names)
    wait_drained(secure.broker, names, 120, workers, admin.kafka_client_kwargs())
    report = asyncio.run(verify_pipeline(admin, first_copy=True))
    assert report.ok, "\n".join(report.lines())
    assert "created" not in worker.log_text()
