"""An idempotent consumer of the clean topic: one charge per messageId (the example of
docs/idempotent-consumer.md).

How to run (with the pipeline of ``make run`` and the servers of ``make servers-up``)::

    python -m scripts.billing_consumer          # Ctrl-C stops it

You should see ``charged <messageId>`` once per event and, for an event delivered
again (a crash before the offset commit, a rebalance, the same event sent twice),
``repeat <messageId> -> ch_<...>`` with the first run's charge id; the ``charges`` table keeps
one row per messageId. Environment: ``KAFKA_BOOTSTRAP_SERVERS`` (127.0.0.1:9092),
``DEDUPE_OUTPUT_TOPIC`` (events-clean), ``BILLING_DSN`` (the test PostgreSQL of
scripts/servers.sh), ``BILLING_IDLE_EXIT`` (stop after that many seconds without a record;
default: run until Ctrl-C).
"""

from __future__ import annotations

import asyncio
import os
from typing import Any

import psycopg

# --8<-- example (docs/idempotent-consumer.md shows the lines from here to the end marker)
from idempotent_consumer import PostgresStore
from idempotent_consumer.kafka import IdempotentConsumer


async def charge(record, claim):  # runs once per messageId (and consumer group)
    message_id = record.key.decode()
    await claim.connection.execute("INSERT INTO charges VALUES (%s)", (message_id,))
    print("charged", message_id, flush=True)  # the row commits together with the claim
    return f"ch_{message_id}"  # stored with the claim: what a repeat gets back


def repeat(record, charge_id):  # a repeat: charge() does not run again
    print("repeat", record.key.decode(), "->", charge_id, flush=True)


def billing(bootstrap_servers, clean_topic, dsn):
    return IdempotentConsumer(
        clean_topic,
        bootstrap_servers=bootstrap_servers,
        group_id="billing",
        store=PostgresStore(dsn),
        handler=charge,
        on_repeat=repeat,
        join_transaction=True,
    )


# --8<-- end


async def main() -> None:
    dsn = os.environ.get("BILLING_DSN", "postgresql://postgres@127.0.0.1:15432/postgres")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS charges (message_id text NOT NULL)")
    consumer = billing(
        os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092"),
        os.environ.get("DEDUPE_OUTPUT_TOPIC", "events-clean"),
        dsn,
    )
    idle_exit = float(os.environ.get("BILLING_IDLE_EXIT", "0"))
    watcher: asyncio.Task[Any] | None = None
    if idle_exit > 0:

        async def stop_when_idle() -> None:
            seen, quiet = -1, 0.0
            while quiet < idle_exit:
                await asyncio.sleep(0.25)
                now = consumer.stats.processed + consumer.stats.repeats
                quiet = quiet + 0.25 if now == seen and now > 0 else 0.0
                seen = now
            consumer.stop()

        watcher = asyncio.create_task(stop_when_idle())
    stats = await consumer.run()
    if watcher is not None:
        watcher.cancel()
    print(f"charged {stats.processed}, repeats {stats.repeats}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
