"""Benchmark contender (a), the limit: a transactional consume -> produce copy, no de-duplication.

    python -m bench.contenders.copy_eos --bootstrap B --input T --output T2 \\
        --partitions P --state-dir D --group G

One aiokafka consumer (group G, ``read_committed``, from the earliest offset, no auto-commit)
and one transactional producer (``transactional.id = G-copy``). Every record is copied to the
same partition of the output topic with its key, value, headers and timestamp; the input
offsets go into the same transaction (``send_offsets_to_transaction``), which commits every
``COMMIT_INTERVAL`` (0.1 s, the worker's default) or every ``COMMIT_RECORDS`` records. That is
the least work an exactly-once stage on this broker and client library can do, so it bounds
what any exactly-once dedup job here can reach. No state: ``--state-dir`` is unused. SIGTERM or
SIGINT commits what was copied and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.structs import TopicPartition

from scripts.topic_admin import create_topics

COMMIT_INTERVAL = 0.1
COMMIT_RECORDS = 10_000


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--partitions", type=int, required=True)
    parser.add_argument("--state-dir", required=True, help="unused (no state)")
    parser.add_argument("--group", required=True)
    return parser.parse_args(argv)


async def run(args: argparse.Namespace) -> None:
    await create_topics(args.bootstrap, [args.output], args.partitions, exist_ok=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    consumer = AIOKafkaConsumer(
        args.input,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=4 * 1024 * 1024,
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=args.bootstrap,
        transactional_id=f"{args.group}-copy",
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
    )
    await producer.start()
    await consumer.start()
    in_txn = False
    offsets: dict[TopicPartition, int] = {}
    records = 0
    opened = 0.0

    async def commit() -> None:
        nonlocal in_txn, records
        if not in_txn:
            return
        if offsets:
            await producer.send_offsets_to_transaction(dict(offsets), args.group)
        await producer.commit_transaction()
        in_txn = False
        offsets.clear()
        records = 0

    try:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=int(COMMIT_INTERVAL * 1000), max_records=5000)
            for tp, msgs in batch.items():
                if not msgs:
                    continue
                if not in_txn:
                    await producer.begin_transaction()
                    in_txn = True
                    opened = time.monotonic()
                for m in msgs:
                    await producer.send(
                        args.output,
                        value=m.value,
                        key=m.key,
                        partition=tp.partition,
                        timestamp_ms=m.timestamp,
                        headers=list(m.headers or ()),
                    )
                offsets[tp] = msgs[-1].offset + 1
                records += len(msgs)
            if in_txn and (
                records >= COMMIT_RECORDS or time.monotonic() - opened >= COMMIT_INTERVAL
            ):
                await commit()
        await commit()
    finally:
        await consumer.stop()
        await producer.stop()


def main(argv: list[str] | None = None) -> int:
    asyncio.run(run(parse_args(argv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
