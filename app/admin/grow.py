"""``python -m app grow --partitions M``: grow every topic of the pipeline from N to M partitions
(M a multiple of N) and carry the ids held into the new layout, so the dedup window survives.

The procedure (docs/operations.md, "Growing the partition count"):

1. stop every worker (producers and the ingest API keep sending: events wait in Kafka);
2. run ``python -m app grow --partitions M`` with the workers' environment;
3. set ``DEDUPE_PARTITIONS=M`` and start the workers.

What it does: refuses while any member of the worker group is alive (DescribeGroups) or when M
is not a multiple of N (``app/admin/grow_plan.py`` says why); grows the input, repartition,
changelog, output and dead-letter topics to M partitions (CreatePartitions); then reads every
changelog partition (read committed) and moves each live entry whose home under M is another
partition: its key, value, headers and timestamp to its new partition and a tombstone in the
old one, both in the same Kafka transaction (chunks of ``--chunk`` entries). A kill -9 at any
moment leaves every id in exactly one partition (a transaction commits both halves or
neither); a re-run with the same transactional id fences the dead run, aborts its open
transaction, and moves what is left. A run with nothing left says so.

Records placed under N that still wait in the input or repartition topic are re-keyed by the
worker under M (``app/worker/dedup.py``), and new partitions start at their log start because
the group never committed there (``app/eos/positions.py``): nothing else needs writing.

You should see one line per grown topic, a progress line per committed chunk, one line per
changelog partition (ids read, moved), then the totals and the seconds taken.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewPartitions
from aiokafka.structs import TopicPartition

from app.admin.grow_kafka import (
    group_members,
    misplaced_entries,
    partition_counts,
    started_consumer,
    wait_for_counts,
    wait_settled,
)
from app.admin.grow_plan import chunks, growth_problem
from app.admin.topics import topic_specs
from app.settings import Settings
from tables.producers import changelog_topic_name as producers_changelog
from tables.seen_ids.table import changelog_topic_name as seen_ids_changelog


class Refused(RuntimeError):
    """The growth cannot start (or go on): the message says why and what to do."""


def _say(line: str) -> None:
    print(line, flush=True)


def transactional_id(settings: Settings) -> str:
    """One per pipeline, so a re-run fences (and aborts the open transaction of) a killed run."""
    return f"{settings.app_id}-grow"


async def _check_no_workers(admin: AIOKafkaAdminClient, settings: Settings) -> None:
    members = await group_members(admin, settings.app_id)
    if members:
        raise Refused(
            f"refusing to grow: {len(members)} worker(s) of group {settings.app_id!r} are alive "
            f"({', '.join(members)}). Stop every worker first (a worker killed with kill -9 "
            "stays a member until its session timeout); producers and the ingest API may keep "
            "sending"
        )


async def _grow_topics(settings: Settings, target: int, changelogs: list[str]) -> bool:
    """Check, then grow the topics still short of ``target``; True when any was grown."""
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers, **settings.kafka_client_kwargs()
    )
    await admin.start()
    try:
        await _check_no_workers(admin, settings)
        topics = [s.name for s in topic_specs(settings, changelogs[0], changelogs[1:])]
        counts = await partition_counts(admin, topics)
        absent = [t for t in topics if t not in counts]
        if absent:
            raise Refused(f"refusing to grow: topics {absent} do not exist (start a worker once)")
        problem = growth_problem(counts, target)
        if problem:
            raise Refused(f"refusing to grow: {problem}")
        short = [t for t in topics if counts[t] < target]
        if short:
            await admin.create_partitions({t: NewPartitions(target) for t in short})
            for t in short:
                _say(f"grew {t!r} from {counts[t]} to {target} partitions")
        await wait_for_counts(admin, topics, target)
        return bool(short)
    finally:
        await admin.close()


async def _move(settings: Settings, target: int, chunk: int, changelogs: list[str]) -> int:
    """Move every misplaced changelog entry; returns how many moved."""
    client = settings.kafka_client_kwargs()
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.bootstrap_servers,
        transactional_id=transactional_id(settings),
        enable_idempotence=True,
        acks="all",
        **client,
    )
    # Starting the producer (InitProducerId) fences an earlier run's and aborts its open
    # transaction, so the partitions settle before they are read.
    await producer.start()
    reader = {
        "bootstrap_servers": settings.bootstrap_servers,
        "enable_auto_commit": False,
        **client,
    }
    committed = await started_consumer(isolation_level="read_committed", **reader)
    uncommitted = await started_consumer(isolation_level="read_uncommitted", **reader)
    settle = max(settings.transaction_timeout, 60.0) + 30.0
    moved_total = 0
    totals = []
    try:
        for changelog in changelogs:
            held = moved = 0
            for p in range(target):
                tp = TopicPartition(changelog, p)
                await wait_settled(committed, uncommitted, tp, settle)
                read, moves = await misplaced_entries(committed, tp, target)
                done = 0
                for part in chunks(moves, chunk):
                    async with producer.transaction():
                        sent = []
                        for m in part:
                            sent.append(
                                await producer.send(
                                    changelog,
                                    m.value,
                                    key=m.key,
                                    partition=m.to,
                                    headers=list(m.headers),
                                    timestamp_ms=m.timestamp_ms,
                                )
                            )
                            sent.append(
                                await producer.send(changelog, None, key=m.key, partition=p)
                            )
                        await asyncio.gather(*sent)
                    done += len(part)
                    _say(f"{changelog}-{p}: moved {done} of {len(moves)} (committed)")
                _say(f"{changelog}-{p}: {read} ids read, {len(moves)} moved")
                # Partitions are read in order and ids only move to higher ones (p + j*N), so
                # each id is counted once, in the partition it ends in.
                held += read - len(moves)
                moved += len(moves)
            totals.append((held, moved))
            moved_total += moved
    finally:
        await committed.stop()
        await uncommitted.stop()
        await producer.stop()
    for what, (held, moved) in zip(("ids", "producers"), totals, strict=False):
        _say(f"{what} held: {held}, moved by this run: {moved}")
    return moved_total


async def grow(settings: Settings, target: int, chunk: int) -> None:
    """The whole growth (module docstring); raises :class:`Refused` when it cannot run."""
    started = time.monotonic()
    changelogs = [seen_ids_changelog(settings), producers_changelog(settings)]
    grown = await _grow_topics(settings, target, changelogs)
    moved = await _move(settings, target, chunk, changelogs)
    admin = AIOKafkaAdminClient(
        bootstrap_servers=settings.bootstrap_servers, **settings.kafka_client_kwargs()
    )
    await admin.start()
    try:
        # A worker started while the tool ran would have passed its start-up check with the
        # old count: say so rather than report success.
        await _check_no_workers(admin, settings)
    finally:
        await admin.close()
    seconds = time.monotonic() - started
    if not grown and not moved:
        _say(f"nothing to do: every topic has {target} partitions and every id is in place")
        return
    _say(
        f"done in {seconds:.1f}s: {moved} ids moved. Now set DEDUPE_PARTITIONS={target} and "
        "start the workers"
    )


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m app grow", description=__doc__.split("\n")[0])
    parser.add_argument("grow")
    parser.add_argument("--partitions", type=int, required=True, help="the new count, M")
    parser.add_argument(
        "--chunk", type=int, default=5000, help="entries moved per transaction (default 5000)"
    )
    args = parser.parse_args(argv)
    if args.chunk < 1:
        parser.error("--chunk must be at least 1")
    settings = Settings.from_env()
    try:
        asyncio.run(grow(settings, args.partitions, args.chunk))
    except Refused as exc:
        print(f"dedupe: {exc}", file=sys.stderr)
        return 1
    return 0
