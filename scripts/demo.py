"""Send a realistic stream with client retries into the running pipeline and report what it did.

With a worker running (``make run`` in another terminal)::

    python -m scripts.demo                 # 10,000 events, 6% repeats, 5 bad records
    python -m scripts.demo --events 50000 --repeats 0.2

You should see, once the worker has processed the stream (a few seconds)::

    sent 10,605 records: 10,000 unique events, 600 repeats, 5 bad records
    forwarded 10,000  dropped as duplicates 600  dead-lettered 5  (after 3.1s)

Every run uses new messageIds, so runs do not interfere. Forwarded counts this run's ids found
in the clean topic read with read_committed; dead-lettered counts this run's bad records in the
dead-letter topic; dropped is the rest. The exit status is 1 when the figures do not add up
(an id forwarded twice, or missing) within --timeout seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
import uuid

from app.settings import Settings
from scripts.streams import OutRecord, build_stream, produce
from scripts.topic_reader import read_topic

RUN_HEADER = "demo-run"


def bad_records(run: bytes) -> list[OutRecord]:
    """One of each common kind of bad input, tagged with the run id."""
    headers = ((RUN_HEADER, run),)
    values = [
        b"{not json",
        b"\xff\xfe\x00garbage",
        json.dumps({"type": "track", "event": "No Id"}).encode(),
        json.dumps({"messageId": "", "type": "track"}).encode(),
        json.dumps(["an", "array"]).encode(),
    ]
    return [OutRecord("", None, v, headers) for v in values]


async def run(settings: Settings, events: int, repeats: float, timeout: float) -> int:
    run_id = uuid.uuid4().hex.encode()
    stream = build_stream(events, repeats, seed=random.randrange(2**32), late_distance=500)
    tagged = [
        OutRecord(r.message_id, r.key, r.value, (*r.headers, (RUN_HEADER, run_id)))
        for r in stream.records
    ]
    bad = bad_records(run_id)
    records = tagged + bad
    client = settings.kafka_client_kwargs()
    await produce(
        settings.bootstrap_servers, settings.input_topic, records, progress=True, client=client
    )
    print(
        f"sent {len(records):,} records: {len(stream.unique):,} unique events, "
        f"{stream.duplicates:,} repeats, {len(bad)} bad records"
    )
    ids = {m.encode() for m in stream.unique}
    started = time.monotonic()
    while True:
        out = await read_topic(settings.bootstrap_servers, settings.output_topic, client=client)
        forwarded = [r for r in out if r.key in ids]
        dlq = await read_topic(settings.bootstrap_servers, settings.dlq_topic, client=client)
        dead = [r for r in dlq if (RUN_HEADER, run_id) in r.headers]
        done = len(forwarded) >= len(ids) and len(dead) >= len(bad)
        if done or time.monotonic() - started > timeout:
            break
        await asyncio.sleep(1.0)
    distinct = len({r.key for r in forwarded})
    dropped = len(records) - len(forwarded) - len(dead)
    print(
        f"forwarded {len(forwarded):,}  dropped as duplicates {dropped:,}  "
        f"dead-lettered {len(dead)}  (after {time.monotonic() - started:.1f}s)"
    )
    if distinct != len(forwarded):
        print(f"ERROR: {len(forwarded) - distinct} ids forwarded more than once")
        return 1
    if not done:
        print(
            f"ERROR: after {timeout:.0f}s only {distinct:,} of {len(ids):,} ids and "
            f"{len(dead)} of {len(bad)} bad records came out; is a worker running?"
        )
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="unique events to send")
    parser.add_argument("--repeats", type=float, default=0.06, help="repeats per unique event")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for output")
    args = parser.parse_args(argv)
    return asyncio.run(run(Settings.from_env(), args.events, args.repeats, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
