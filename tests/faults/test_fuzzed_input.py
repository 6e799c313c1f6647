"""F12a: 10,000 generated records (valid events and repeats, misplaced and null-keyed copies,
and bad input of every kind: random bytes, damaged JSON, wrong types, lone surrogates, values
past the size limit, deep nesting) through a real worker. Every record must end in exactly one
place: its id once in the clean topic (first copy's bytes), dropped as a repeat, or once in the
dead-letter topic with the reason the rules give and its source coordinates; the worker neither
crashes nor stalls (everything committed within two minutes).

How to run: part of ``make test-faults``; alone,
``DEDUPE_TEST_KAFKA_PORT=19092 .venv/bin/python -m pytest -q -s tests/faults/test_fuzzed_input.py``.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter

import pytest

from app import rules
from app.settings import Settings
from scripts.streams import OutRecord, produce
from scripts.topic_reader import read_topic
from tests.faults.conftest import SCALE, Reliability
from tests.faults.scenario import drain_and_verify, record
from tests.support import Broker, Names
from tests.workers import Worker

pytestmark = pytest.mark.faults

RECORDS = 10_000 * SCALE
#: Every reason the input contract (app/rules.py) gives a record keyed by messageId.
MESSAGE_ID_REASONS = {
    "null_value",
    "too_large",
    "not_utf8",
    "not_json",
    "not_object",
    "no_message_id",
    "message_id_not_string",
    "empty_message_id",
    "message_id_too_long",
}
DEFAULTS = Settings.from_env({})


def _event(rng: random.Random, mid: object) -> dict[str, object]:
    return {
        "type": rng.choice(["track", "identify", "page"]),
        "messageId": mid,
        "userId": f"u{rng.randrange(100)}",
        "properties": {"n": rng.randrange(10**6), "s": rng.choice(["", "é", "𝄞", "\u0000"])},
    }


def generate(seed: int, n: int) -> list[OutRecord]:
    """``n`` records: about half first copies of valid events, a fifth repeats (same or other
    bytes, same key, null key or another key), the rest bad input of every kind."""
    rng = random.Random(seed)
    ids: list[str] = []
    first: dict[str, tuple[bytes, bool]] = {}  # id -> (first copy's bytes, keyed by its id)
    out: list[OutRecord] = []

    def add(key: bytes | None, value: bytes | None, mid: str = "") -> None:
        headers = tuple((f"h{i}", rng.randbytes(rng.randrange(4))) for i in range(rng.randrange(3)))
        out.append(OutRecord(mid, key, value, headers))  # type: ignore[arg-type]

    while len(out) < n:
        roll = rng.random()
        if roll < 0.5 or not ids:  # a first copy, keyed by its id (sometimes not)
            mid = rng.choice(
                [
                    str(uuid.UUID(int=rng.getrandbits(128))),
                    f"ajs-{rng.randrange(10**9)}",
                    f"é-{rng.randrange(10**6)}",
                ]
            )
            if mid in first:  # ids are drawn at random: a second "first copy" is a repeat
                continue
            ids.append(mid)
            value = json.dumps(_event(rng, mid), ensure_ascii=rng.random() < 0.5).encode()
            key = mid.encode() if rng.random() < 0.9 else rng.choice([None, b"other"])
            first[mid] = (value, key == mid.encode())
            add(key, value, mid)
        elif roll < 0.7:  # a repeat, any key
            mid = rng.choice(ids)
            value, keyed = first[mid]
            key = rng.choice([mid.encode(), mid.encode(), None, b"x"])
            # Other bytes only where every copy sits in the id's own partition, in offset order:
            # a re-keyed copy reaches that partition's decision at a moment nobody orders.
            if keyed and key == mid.encode() and rng.random() < 0.5:
                value = json.dumps(_event(rng, mid)).encode()
            add(key, value, mid)
        else:
            add(*bad(rng))
    return out


def bad(rng: random.Random) -> tuple[bytes | None, bytes | None]:
    """A bad record (or a strange valid one: NaN, a big number, an escaped id), with a key."""
    key = rng.choice([None, b"k", rng.randbytes(8)])
    mid = f"b-{rng.getrandbits(40)}"
    good = json.dumps(_event(rng, mid)).encode()
    kind = rng.randrange(14)
    if kind == 0:  # a tombstone (aiokafka sends none without a key)
        return key or b"k", None
    if kind == 1:
        return key, rng.randbytes(rng.randrange(1, 80))
    if kind == 2:  # damaged JSON: cut, a byte changed, bytes inserted
        at = rng.randrange(len(good))
        return key, rng.choice(
            [
                good[:at],
                good[:at] + bytes([good[at] ^ rng.randrange(1, 256)]) + good[at + 1 :],
                good[:at] + rng.randbytes(3) + good[at:],
            ]
        )
    if kind == 3:
        return key, json.dumps(rng.choice([[mid], "s", 3, None, True, 1.5])).encode()
    if kind == 4:
        return key, b'{"type": "track", "userId": "u"}'
    if kind == 5:
        return key, json.dumps(
            {"messageId": rng.choice([1, None, [mid], {"id": mid}, True])}
        ).encode()
    if kind == 6:
        return key, b'{"messageId": ""}'
    if kind == 7:
        return key, json.dumps({"messageId": "é" * rng.randrange(129, 200)}).encode()
    if kind == 8:  # a lone surrogate in the id: not encodable as UTF-8
        return key, b'{"messageId": "\\ud800' + mid.encode() + b'"}'
    if kind == 9:
        return key, b'{"messageId": "' + mid.encode() + b'", "pad": "' + b"x" * 40_000 + b'"}'
    if kind == 10:  # not UTF-8 (Latin-1 / UTF-16)
        return key, json.dumps({"messageId": mid + "é"}, ensure_ascii=False).encode(
            rng.choice(["latin-1", "utf-16"])
        )
    if kind == 11:  # valid for the standard library, refused by orjson
        extra = rng.choice(["NaN", "-Infinity", "1e400", "9" * 40])
        return mid.encode(), ('{"x": ' + extra + ', "messageId": "' + mid + '"}').encode()
    if kind == 12:  # nested deeper than any parser's recursion limit
        depth = rng.choice([50, 2_000, 100_000])
        return (
            key,
            b'{"messageId": "' + mid.encode() + b'", "d": ' + b"[" * depth + b"]" * depth + b"}",
        )
    return key, b"\xef\xbb\xbf" + good  # a UTF-8 byte-order mark


def test_f12a_ten_thousand_generated_records_each_end_in_exactly_one_place(
    broker: Broker, names: Names, workers: list[Worker], reliability: Reliability
) -> None:
    worker = Worker(broker, names)
    workers.append(worker)
    worker.start()
    worker.wait_ready()
    records = generate(seed=20261125, n=RECORDS)
    asyncio.run(produce(broker.bootstrap, names.input_topic, records))
    report, waited = drain_and_verify(broker, names, workers, timeout=120)
    assert worker.alive(), worker.log_text()[-4000:]

    inputs = {
        (r.partition, r.offset): r
        for r in asyncio.run(read_topic(broker.bootstrap, names.input_topic))
    }
    verdicts = {
        src: rules.inspect(
            r.value,
            max_event_bytes=DEFAULTS.max_event_bytes,
            max_id_bytes=DEFAULTS.max_message_id_bytes,
        )
        for src, r in inputs.items()
    }
    dead = asyncio.run(read_topic(broker.bootstrap, names.dlq_topic))
    reasons: Counter[str] = Counter()
    for d in dead:
        h = dict(d.headers)
        src = (int(h[rules.SOURCE_PARTITION_HEADER]), int(h[rules.SOURCE_OFFSET_HEADER]))
        verdict = verdicts[src]
        assert isinstance(verdict, rules.Invalid), src
        assert h[rules.ERROR_HEADER] == verdict.reason.value.encode() and h[rules.DETAIL_HEADER]
        assert d.value == inputs[src].value and d.key == inputs[src].key
        reasons[verdict.reason.value] += 1
    invalid = sum(isinstance(v, rules.Invalid) for v in verdicts.values())
    valid_ids = {v.id_bytes for v in verdicts.values() if isinstance(v, rules.Valid)}
    print(
        f"\nF12a: {len(records):,} records: {len(valid_ids):,} distinct valid ids, "
        f"{len(records) - invalid - len(valid_ids):,} repeats, {invalid:,} bad; "
        f"dead-lettered {len(dead):,} by reason {dict(reasons.most_common())}"
    )
    record(
        reliability,
        f"F12a fuzzed input ({RECORDS:,} generated records: repeats, misplaced keys, bad input "
        "of every kind)",
        len(records),
        invalid,
        report,
        waited,
    )
    assert len(dead) == invalid
    assert report.clean.total == len(valid_ids)
    assert set(reasons) == MESSAGE_ID_REASONS, reasons
