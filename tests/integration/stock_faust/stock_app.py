"""A textbook de-duplication agent on STOCK faust-streaming, configured from the environment.

Nothing here replaces or patches Faust: it is the app a Faust user would write after reading the
docs (``processing_guarantee="exactly_once"``, a RocksDB table of seen ids, an agent that
forwards an event only when its id is not in the table). The tests in this folder run it as a
subprocess (``python -m tests.integration.stock_faust.stock_app worker``) so that they can
``kill -9`` it like a crash would.

Two optional hooks exist only to make a crash land at a chosen moment; they observe Faust and
never change what it does:

``STOCK_STALL_KEY``
    when the agent meets this key, it has already written it to the table and then waits
    forever before sending it on (think of a slow call between the state update and the send),
    so a ``kill -9`` is certain to land between the two.
``STOCK_KILL_ON_SLIPPED_COMMIT``
    wrap Faust's ``TransactionManager.commit``: if, when a commit returns, the producer buffer
    still holds changelog records (they will go into the *next* transaction), print them and
    ``SIGKILL`` this process at once, as if the machine had died right after the commit.
"""

from __future__ import annotations

import asyncio
import os
import signal

import faust
from faust.transport.consumer import TransactionManager

ENV = os.environ
APP_ID = ENV["STOCK_APP_ID"]
INPUT = ENV["STOCK_INPUT"]
PARTITIONS = int(ENV.get("STOCK_PARTITIONS", "2"))
STALL_KEY = ENV.get("STOCK_STALL_KEY", "").encode() or None

app = faust.App(
    APP_ID,
    broker=f"kafka://{ENV.get('STOCK_BROKER', '127.0.0.1:19092')}",
    store="rocksdb://",
    datadir=ENV["STOCK_DATADIR"],
    autodiscover=False,
    processing_guarantee=ENV.get("STOCK_GUARANTEE", "exactly_once"),
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
seen = app.Table(
    "seen",
    default=None,
    partitions=PARTITIONS,
    key_type=bytes,
)


#: id -> (input partition, offset), kept only for ``STOCK_KILL_ON_SLIPPED_COMMIT``.
offset_of: dict[bytes, tuple[int, int]] = {}
TRACK_OFFSETS = bool(ENV.get("STOCK_KILL_ON_SLIPPED_COMMIT"))


@app.agent(source)
async def dedup(stream: faust.StreamT) -> None:
    async for event in stream.events():
        key = event.key
        if TRACK_OFFSETS:
            offset_of[key] = (event.message.partition, event.message.offset)
        if key not in seen:
            seen[key] = 1
            if key == STALL_KEY:
                print(f"STOCK-STALLED {key.decode()}", flush=True)
                await asyncio.Event().wait()
            await out_topic.send(key=key, value=event.value)


if ENV.get("STOCK_KILL_ON_SLIPPED_COMMIT"):
    _commit = TransactionManager.commit
    _changelog = f"{APP_ID}-seen-changelog"

    async def _commit_then_die_if_slipped(self, offsets, start_new_transaction=True):  # type: ignore[no-untyped-def]
        result = await _commit(self, offsets, start_new_transaction)
        committed = {tp.partition: off for tp, off in offsets.items() if tp.topic == INPUT}
        pending = [
            fut.message.key
            for fut in list(self.app.producer.buffer.pending._queue)
            if fut.message.channel.get_topic_name() == _changelog
        ]
        # changelog records still waiting in the buffer for events whose offsets were committed
        slipped = [
            k
            for k in pending
            if k in offset_of and offset_of[k][1] < committed.get(offset_of[k][0], -1)
        ]
        if slipped:
            print(f"STOCK-SLIPPED {len(slipped)} of {len(pending)} pending: {slipped}", flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    TransactionManager.commit = _commit_then_die_if_slipped  # type: ignore[method-assign]


if __name__ == "__main__":
    app.main()
