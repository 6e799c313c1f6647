"""Send a realistic stream with client retries into the running pipeline and report what it did.

With a worker running (``make run`` in another terminal)::

    make demo                              # 10,000 events, 6% repeats, 5 bad records
    python -m scripts.demo --events 50000 --repeats 0.2

You should see, once the worker has processed the stream (a few seconds)::

    sent 11,242 records: 10,000 unique events, 600 repeats, 5 bad records, and 637 for the
    other strategies
    after 1.4s, by strategy:
      message_id         sent 10,600  forwarded 10,000  dropped as duplicates 600  dead-lettered 0
      producer_sequence  sent    437  forwarded    400  dropped as duplicates  37  dead-lettered 0
      fingerprint        sent    200  forwarded    100  dropped as duplicates 100  dead-lettered 0
                         (with DEDUPE_MISSING_ID=fingerprint)
      bad records        dead-lettered 5 (as they should be)

Producer sequences (two producers, 200 sequences each, retries) are always on. Events without a
messageId are deduplicated by fingerprint only when the worker runs with
DEDUPE_MISSING_ID=fingerprint: ``make run`` and ``make demo`` both set it (unless it is set
already), and the demo sends such events only when its own setting says the worker fingerprints
them (otherwise a note says what they need). With DEDUPE_VERIFY_CONTENT=true the demo also
reuses 5 ids for other events (dead-lettered with ``dedupe.error=messageId-reused``).

Every run uses new messageIds and producer names, so runs do not interfere. Forwarded and
dead-lettered count this run's records in the clean and dead-letter topics (read_committed), by
a header the demo adds; dropped is the rest. The exit status is 1 when the figures do not add up
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
from collections import Counter

from app.settings import Settings
from scripts.streams import OutRecord, build_stream, produce
from scripts.topic_reader import read_topic

RUN_HEADER = "demo-run"


def bad_records(run: bytes, *, fingerprint: bool = False) -> list[OutRecord]:
    """One of each common kind of bad input, tagged with the run id (an event without a
    messageId is bad unless the worker fingerprints such events)."""
    headers = ((RUN_HEADER, run),)
    values = [
        b"{not json",
        b"\xff\xfe\x00garbage",
        json.dumps({"messageId": "", "type": "track"}).encode(),
        json.dumps(["an", "array"]).encode(),
        json.dumps({"type": "track", "messageId": 42}).encode(),
    ]
    return [OutRecord("", None, v, headers) for v in values]


#: The kind of each demo record (a header), to count what came out per strategy.
KIND_HEADER = "demo-kind"


def strategy_records(settings: Settings, rng: random.Random) -> list[OutRecord]:
    """Records for the other strategies: two producers' sequences with retries, (with
    DEDUPE_MISSING_ID=fingerprint) events without a messageId sent twice, and (with
    DEDUPE_VERIFY_CONTENT) ids reused for other events. Each strategy is shown only with the
    setting that makes it work, so every line of the table is that strategy succeeding."""
    out: list[OutRecord] = []
    nonce = uuid.uuid4().hex
    for producer in (f"billing-{nonce[:8]}-1", f"billing-{nonce[:8]}-2"):  # new per run
        for seq in range(200):
            headers = (
                (KIND_HEADER, b"producer_sequence"),
                ("dedupe.producer", producer.encode()),
                ("dedupe.sequence", str(seq).encode()),
            )
            value = json.dumps({"type": "track", "event": "Invoice Paid", "n": seq}).encode()
            rec = OutRecord(f"{producer}:{seq}", producer.encode(), value, headers)
            out += [rec, rec] if rng.random() < 0.1 else [rec]  # a retry follows its original
    for i in range(100 if settings.missing_id == "fingerprint" else 0):
        value = json.dumps({"type": "track", "event": "Webhook", "nonce": nonce, "i": i}).encode()
        rec = OutRecord(f"fp:{i}", None, value, ((KIND_HEADER, b"fingerprint"),))
        out += [rec, rec]
    if settings.verify_content:
        for i in range(5):
            mid = f"reused-{nonce}-{i}"
            for event in ("Signed Up", "Order Completed"):  # one id, two different events
                value = json.dumps({"type": "track", "event": event, "messageId": mid}).encode()
                out.append(OutRecord(mid, mid.encode(), value, ((KIND_HEADER, b"reused"),)))
    return out


def tally(records: list[object], run_id: bytes) -> Counter[str]:
    """This run's records of a topic, by kind."""
    counts: Counter[str] = Counter()
    for r in records:
        headers = dict(r.headers)  # type: ignore[attr-defined]
        if headers.get(RUN_HEADER) == run_id:
            counts[headers.get(KIND_HEADER, b"message_id").decode()] += 1
    return counts


async def run(settings: Settings, events: int, repeats: float, timeout: float) -> int:
    run_id = uuid.uuid4().hex.encode()
    rng = random.Random()
    stream = build_stream(events, repeats, seed=rng.randrange(2**32), late_distance=500)
    bad = bad_records(run_id, fingerprint=settings.missing_id == "fingerprint")
    others = strategy_records(settings, rng)
    records = [
        OutRecord(r.message_id, r.key, r.value, (*r.headers, (RUN_HEADER, run_id)))
        for r in [*stream.records, *others]
    ] + bad
    client = settings.kafka_client_kwargs()
    await produce(
        settings.bootstrap_servers, settings.input_topic, records, progress=True, client=client
    )
    print(
        f"sent {len(records):,} records: {len(stream.unique):,} unique events, "
        f"{stream.duplicates:,} repeats, {len(bad)} bad records, and {len(others):,} for the\n"
        "other strategies"
    )
    fingerprint = settings.missing_id == "fingerprint"
    want_out = Counter(
        {"message_id": len(stream.unique), "producer_sequence": 400}
        | ({"fingerprint": 100} if fingerprint else {})
        | ({"reused": 5} if settings.verify_content else {})
    )
    want_dead = Counter(
        {"message_id": len(bad)} | ({"reused": 5} if settings.verify_content else {})
    )
    started = time.monotonic()
    while True:
        out = await read_topic(settings.bootstrap_servers, settings.output_topic, client=client)
        dlq = await read_topic(settings.bootstrap_servers, settings.dlq_topic, client=client)
        got_out, got_dead = tally(out, run_id), tally(dlq, run_id)
        done = got_out >= want_out and got_dead >= want_dead
        if done or time.monotonic() - started > timeout:
            break
        await asyncio.sleep(1.0)
    ids = {m.encode() for m in stream.unique}
    forwarded = [r for r in out if r.key in ids]
    distinct = len({r.key for r in forwarded})
    sent = Counter(dict(r.headers).get(KIND_HEADER, b"message_id").decode() for r in records)
    sent["message_id"] -= len(bad)
    print(f"after {time.monotonic() - started:.1f}s, by strategy:")
    print("\n".join(table(settings, sent, got_out, got_dead, len(bad))))
    if distinct != len(forwarded):
        print(f"ERROR: {len(forwarded) - distinct} ids forwarded more than once")
        return 1
    if not done:
        print(
            f"ERROR: after {timeout:.0f}s the output is short ({dict(got_out)} of "
            f"{dict(want_out)}; dead-lettered {dict(got_dead)} of {dict(want_dead)}); "
            "is a worker running?"
        )
        if got_dead["fingerprint"]:
            print(
                "  the worker dead-letters events without a messageId: start it with "
                "DEDUPE_MISSING_ID=fingerprint too (make run sets it)"
            )
        return 1
    return 0


#: The setting each optional strategy needs (the demo shows a strategy only with it on).
NEEDS = {"fingerprint": "DEDUPE_MISSING_ID=fingerprint", "reused": "DEDUPE_VERIFY_CONTENT=true"}


def table(
    settings: Settings, sent: Counter[str], out: Counter[str], dead: Counter[str], bad: int
) -> list[str]:
    """The table of what each strategy did with this run's records (``bad``: the bad records,
    tagged as message_id), then a note for each strategy left out and the setting it needs."""
    lines = []
    for kind in ("message_id", "producer_sequence", "fingerprint", "reused"):
        if not sent[kind] and kind != "message_id":
            continue
        gone = dead[kind] - (bad if kind == "message_id" else 0)
        dropped = sent[kind] - out[kind] - gone
        lines.append(
            f"  {kind:<18} sent {sent[kind]:>6,}  forwarded {out[kind]:>6,}  "
            f"dropped as duplicates {dropped:>3,}  dead-lettered {gone:,}"
        )
        if kind in NEEDS:  # the setting that makes this strategy work, under its line
            lines.append(f"  {'':<18} (with {NEEDS[kind]})")
    lines.append(f"  bad records        dead-lettered {bad} (as they should be)")
    if settings.missing_id != "fingerprint":
        lines.append(
            "  (events without a messageId are not sent: the worker dead-letters them unless "
            "it runs with DEDUPE_MISSING_ID=fingerprint, as make run and make demo set it)"
        )
    if not settings.verify_content:
        lines.append("  (DEDUPE_VERIFY_CONTENT=true also sends ids reused for other events)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="unique events to send")
    parser.add_argument("--repeats", type=float, default=0.06, help="repeats per unique event")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for output")
    args = parser.parse_args(argv)
    return asyncio.run(run(Settings.from_env(), args.events, args.repeats, args.timeout))


if __name__ == "__main__":
    sys.exit(main())
