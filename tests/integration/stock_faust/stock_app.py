"""A textbook de-duplication agent on STOCK faust-streaming, configured from the environment.

Nothing here replaces or patches Faust's behaviour: it is the app a Faust user writes after
reading the docs (``processing_guarantee="exactly_once"``, a RocksDB table of seen ids, an agent
that forwards an event only when its id is not in the table yet). The tests in this folder run it
as a subprocess (``python -m tests.integration.stock_faust.stock_app worker``) so they can
``kill -9`` it the way a crash would.

Environment: ``STOCK_APP_ID``, ``STOCK_INPUT``, ``STOCK_OUTPUT``, ``STOCK_DATADIR`` (required),
``STOCK_BROKER``, ``STOCK_PARTITIONS``, ``STOCK_COMMIT_INTERVAL`` (Faust's
``broker_commit_interval``, seconds).

Three optional test hooks only observe Faust, or pin the moment of a crash; none changes what
Faust does:

``STOCK_STALL_KEY``
    when the agent meets this id, it has already written it to the table; it then waits forever
    before sending it on (think of a slow call between the state update and the send), so a
    ``kill -9`` is certain to land between the two.
``STOCK_KILL_ON_SLIPPED_COMMIT``
    after each return of Faust's ``TransactionManager.commit``: if Faust's producer buffer still
    holds changelog records of events whose offsets that commit just covered (those records can
    only go into the *next* transaction), print them and ``SIGKILL`` this process at once, as if
    the machine had died right after the commit.
``STOCK_LOG_COMMITS``
    print what each ``TransactionManager.commit`` call was given and what it returned.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from typing import Any

import faust
from faust.transport.consumer import TransactionManager

ENV = os.environ
APP_ID = ENV["STOCK_APP_ID"]
INPUT = ENV["STOCK_INPUT"]
PARTITIONS = int(ENV.get("STOCK_PARTITIONS", "2"))
STALL_KEY = ENV.get("STOCK_STALL_KEY", "").encode() or None
KILL_ON_SLIPPED_COMMIT = bool(ENV.get("STOCK_KILL_ON_SLIPPED_COMMIT"))
LOG_COMMITS = bool(ENV.get("STOCK_LOG_COMMITS"))

app = faust.App(
    APP_ID,
    broker=f"kafka://{ENV.get('STOCK_BROKER', '127.0.0.1:19092')}",
    store="rocksdb://",
    datadir=ENV["STOCK_DATADIR"],
    autodiscover=False,
    processing_guarantee="exactly_once",
    consumer_auto_offset_reset="earliest",
    topic_partitions=PARTITIONS,
    topic_replication_factor=1,
    table_standby_replicas=0,
    broker_commit_interval=float(ENV.get("STOCK_COMMIT_INTERVAL", "2.8")),
    broker_session_timeout=3.0,
    broker_heartbeat_interval=0.5,
    web_enabled=False,
)

source = app.topic(
    INPUT,
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
    partitions=PARTITIONS,
)
out_topic = app.topic(
    ENV["STOCK_OUTPUT"],
    key_type=bytes,
    value_type=bytes,
    key_serializer="raw",
    value_serializer="raw",
)
#: Changelog topic ``{APP_ID}-seen-changelog``; keys are the raw ids (Faust's default key codec).
seen = app.Table("seen", default=None, partitions=PARTITIONS, key_type=bytes)

#: id -> (input partition, offset); filled only for ``STOCK_KILL_ON_SLIPPED_COMMIT``.
offset_of: dict[bytes, tuple[int, int]] = {}


@app.agent(source)
async def dedup(stream: faust.StreamT) -> None:
    async for event in stream.events():
        key = event.key
        if KILL_ON_SLIPPED_COMMIT:
            offset_of[key] = (event.message.partition, event.message.offset)
        if key not in seen:
            seen[key] = 1
            if key == STALL_KEY:
                print(f"STOCK-STALLED {key.decode()}", flush=True)
                await asyncio.Event().wait()
            await out_topic.send(key=key, value=event.value)


def _slipped_changelog_keys(tm: TransactionManager, committed: dict[int, int]) -> list[bytes]:
    """Changelog records still in Faust's producer buffer whose events' offsets are committed."""
    changelog = f"{APP_ID}-seen-changelog"
    pending = [
        fut.message.key
        for fut in list(tm.app.producer.buffer.pending._queue)
        if fut.message.channel.get_topic_name() == changelog
    ]
    return [
        k
        for k in pending
        if k in offset_of and offset_of[k][1] < committed.get(offset_of[k][0], -1)
    ]


if KILL_ON_SLIPPED_COMMIT or LOG_COMMITS:
    _stock_commit = TransactionManager.commit

    async def _observed_commit(
        self: TransactionManager, offsets: Any, start_new_transaction: bool = True
    ) -> bool:
        result: bool = await _stock_commit(self, offsets, start_new_transaction)
        committed = {tp.partition: off for tp, off in offsets.items() if tp.topic == INPUT}
        if LOG_COMMITS:
            print(f"STOCK-COMMIT {json.dumps(committed)} returned {result}", flush=True)
        if KILL_ON_SLIPPED_COMMIT:
            slipped = _slipped_changelog_keys(self, committed)
            if slipped:
                listed = " ".join(k.decode() for k in slipped)
                print(f"STOCK-SLIPPED {json.dumps(committed)} {listed}", flush=True)
                os.kill(os.getpid(), signal.SIGKILL)
        return result

    TransactionManager.commit = _observed_commit  # type: ignore[method-assign]


if __name__ == "__main__":
    app.main()
