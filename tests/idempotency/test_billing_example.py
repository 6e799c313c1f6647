"""The documented idempotent consumer (scripts/billing_consumer.py) on the real broker and
PostgreSQL: every event charged once, a redelivered event answered from its claim; and the
docs/idempotent-consumer.md shows the example's code as it is in the file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tests.idempotency.conftest import Servers
from tests.support import ROOT, Broker, unique_suffix

pytestmark = pytest.mark.idempotency

EXAMPLE = ROOT / "scripts" / "billing_consumer.py"


def example_lines() -> list[str]:
    lines = EXAMPLE.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("# --8<-- example"))
    end = next(i for i, line in enumerate(lines) if line.startswith("# --8<-- end"))
    return lines[start + 1 : end]


def test_the_docs_show_the_example_as_it_is() -> None:
    block = "\n".join(example_lines()).strip()
    doc = ROOT / "docs" / "idempotent-consumer.md"
    assert block in doc.read_text(), "copy scripts/billing_consumer.py's example"


async def produce_twice(bootstrap: str, topic: str, ids: list[str]) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    finally:
        await admin.close()
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"tx-{topic}")
    await producer.start()
    try:
        for _ in range(2):  # every event twice, as a redelivery would bring it
            async with producer.transaction():
                for message_id in ids:
                    value = json.dumps({"messageId": message_id, "event": "Order Completed"})
                    await producer.send(topic, key=message_id.encode(), value=value.encode())
    finally:
        await producer.stop()


def test_billing_consumer_charges_once_and_shows_repeats(
    broker: Broker, servers: Servers, tmp_path: Path
) -> None:
    ids = [f"ajs-{uuid.uuid4().hex}" for _ in range(20)]
    topic, schema = f"clean-{unique_suffix()}", f"billing_{unique_suffix()}"
    asyncio.run(produce_twice(broker.bootstrap, topic, ids))
    with psycopg.connect(servers.dsn, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    dsn = f"{servers.dsn}?options=-csearch_path%3D{schema}"  # its tables in a schema of its own
    try:
        out = subprocess.run(
            [sys.executable, "-m", "scripts.billing_consumer"],
            cwd=ROOT,
            env={
                **os.environ,
                "KAFKA_BOOTSTRAP_SERVERS": broker.bootstrap,
                "DEDUPE_OUTPUT_TOPIC": topic,
                "BILLING_DSN": dsn,
                "BILLING_IDLE_EXIT": "2",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout.splitlines()
        charged = [line.split()[1] for line in out if line.startswith("charged ajs-")]
        repeats = [line.split() for line in out if line.startswith("repeat ")]
        assert sorted(charged) == sorted(ids)
        assert sorted(r[1] for r in repeats) == sorted(ids)
        assert all(r[3] == f"ch_{r[1]}" for r in repeats), repeats  # the first run's charge id
        assert out[-1] == "charged 20, repeats 20"
        with psycopg.connect(dsn) as conn:
            rows = conn.execute("SELECT message_id FROM charges").fetchall()
        assert sorted(r[0] for r in rows) == sorted(ids)
    finally:
        with psycopg.connect(servers.dsn, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
