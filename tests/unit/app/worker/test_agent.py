"""The agent's record handling (``Deduplicator.handle`` per record, ``handle_batch`` per batch),
with the transaction and the table replaced by in-memory fakes: which record goes where, with
which key, bytes and headers."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

import dedupe_native
import pytest
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from app import rules, strategy
from app.settings import Settings
from app.worker.dedup import Deduplicator, RecordOutcome, record_ms
from tables import window

SETTINGS = Settings.from_env({"DEDUPE_PARTITIONS": "8"})


@dataclass
class Msg:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    timestamp: int = 1_790_000_000_123  # ms, as aiokafka's ConsumerRecord


@dataclass
class Sent:
    topic: str
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes]]
    timestamp_ms: int | None
    partition: int | None


class FakeTxn:
    def __init__(self) -> None:
        self.sent: list[Sent] = []

    async def send(self, topic, *, key, value, headers, timestamp_ms, partition):  # type: ignore[no-untyped-def]
        self.sent.append(Sent(topic, key, value, list(headers or []), timestamp_ms, partition))


class FakeSeenIds:
    """``SeenIds``' contract in memory: window decisions with content hashes, ages out nothing."""

    def __init__(self) -> None:
        self.first: dict[bytes, int] = {}
        self.content: dict[bytes, bytes] = {}
        self.aged_at: list[int] = []

    def decide(
        self,
        key: bytes,
        record_ms: int,
        partition: int,
        content: bytes = b"",
        last_seen: bool = False,
    ) -> window.Verdict:
        held = self.first.get(key)
        entry = None if held is None else window.Entry(held, 0, 0, self.content.get(key, b""))
        verdict = window.judge(entry, record_ms, round(SETTINGS.window * 1000), content)
        if verdict is window.Verdict.FIRST:
            self.first[key] = record_ms
            self.content[key] = content
        elif (
            verdict is window.Verdict.REPEAT
            and entry
            and window.rearms(entry.first_seen_ms, record_ms, last_seen)
        ):
            self.first[key] = record_ms
        return verdict

    def age_out(self, record_ms: int, partition: int) -> int:
        self.aged_at.append(record_ms)
        return 0

    def decide_span(
        self,
        ids: list[bytes],
        times: list[int],
        partition: int,
        last_seen: bool = False,
        content: bytes = b"",
        age: bool = True,
    ) -> list[window.Verdict]:
        # SeenIds.decide_span's contract (tests/unit/tables/seen_ids/test_decide_span.py holds
        # the real one to it): decide, then age out, a record at a time.
        verdicts = []
        for key, ms in zip(ids, times, strict=True):
            verdicts.append(self.decide(key, ms, partition, content, last_seen))
            if age:
                self.age_out(ms, partition)
        return verdicts


def event(mid: object) -> bytes:
    return json.dumps({"type": "track", "messageId": mid}).encode()


def placed(mid: str, value: bytes | None = None, **kw: object) -> Msg:
    """A record keyed by its messageId in the partition its key hashes to."""
    p = rules.partition_for(mid.encode(), SETTINGS.partitions)
    return Msg(SETTINGS.input_topic, p, 7, mid.encode(), value or event(mid), **kw)  # type: ignore[arg-type]


async def run(*msgs: Msg, settings: Settings = SETTINGS) -> tuple[list[str], FakeTxn, FakeSeenIds]:
    seen = FakeSeenIds()
    dedup = Deduplicator(settings, seen)  # type: ignore[arg-type]
    txn = FakeTxn()
    outcomes = [await dedup.handle(txn, m, record_ms(m)) for m in msgs]  # type: ignore[arg-type]
    return outcomes, txn, seen


async def test_first_sighting_is_forwarded_and_remembered() -> None:
    msg = placed("m-1", headers=[("h", b"1")])
    outcomes, txn, table = await run(msg)
    assert outcomes == [RecordOutcome.FORWARDED]
    assert txn.sent == [
        Sent(
            SETTINGS.output_topic,
            b"m-1",
            msg.value,
            [("h", b"1")],
            1_790_000_000_123,
            msg.partition,
        )
    ]
    assert table.first == {b"m-1": 1_790_000_000_123}
    assert table.aged_at == [1_790_000_000_123]  # age-out runs after each decision


async def test_repeats_are_dropped_and_do_not_move_the_first_seen_time() -> None:
    first = placed("m-1")
    later = placed("m-1", timestamp=1_790_000_999_000)
    outcomes, txn, table = await run(first, later, later)
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.DUPLICATE]
    assert len(txn.sent) == 1
    assert table.first[b"m-1"] == 1_790_000_000_123


@pytest.mark.parametrize(
    "key, partition_shift",
    [(None, 0), (b"other", 0), ("same", 1)],
    ids=["null-key", "other-key", "wrong-partition"],
)
async def test_misplaced_records_are_rekeyed_not_decided(
    key: bytes | str | None, partition_shift: int
) -> None:
    mid = "m-2"
    right = rules.partition_for(mid.encode(), SETTINGS.partitions)
    k = mid.encode() if key == "same" else key
    msg = Msg(SETTINGS.input_topic, (right + partition_shift) % 8, 3, k, event(mid), [("a", b"b")])  # type: ignore[arg-type]
    outcomes, txn, table = await run(msg)
    assert outcomes == [RecordOutcome.REKEYED]
    assert txn.sent == [
        Sent(
            SETTINGS.repartition_topic, mid.encode(), event(mid), [("a", b"b")], msg_ts(msg), right
        )
    ]
    assert table.first == {}


def msg_ts(msg: Msg) -> int:
    return msg.timestamp


async def test_records_from_the_repartition_topic_are_decided_where_they_land() -> None:
    mid = "m-3"
    p = rules.partition_for(mid.encode(), SETTINGS.partitions)
    rekeyed = Msg(SETTINGS.repartition_topic, p, 0, mid.encode(), event(mid))
    outcomes, txn, _ = await run(rekeyed, placed(mid))
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE]
    assert [s.topic for s in txn.sent] == [SETTINGS.output_topic]


async def test_a_repartition_record_placed_under_an_older_partition_count_is_rekeyed() -> None:
    """After ``python -m app grow`` from 4 to 8 partitions: a record the old workers re-keyed sits
    in murmur2 % 4, and its id's state now lives in murmur2 % 8 (app/admin/grow.py)."""
    mid = next(m for m in (f"grown-{i}" for i in range(100)) if _moved(m.encode()))
    old = rules.partition_for(mid.encode(), 4)
    right = rules.partition_for(mid.encode(), SETTINGS.partitions)
    rekeyed = Msg(SETTINGS.repartition_topic, old, 0, mid.encode(), event(mid))
    outcomes, txn, table = await run(rekeyed)
    assert outcomes == [RecordOutcome.REKEYED]
    assert [(s.topic, s.partition) for s in txn.sent] == [(SETTINGS.repartition_topic, right)]
    assert table.first == {}


def _moved(key: bytes) -> bool:
    return rules.partition_for(key, 4) != rules.partition_for(key, SETTINGS.partitions)


@pytest.mark.parametrize(
    "value, reason",
    [
        (None, "null_value"),
        (b"nope", "not_json"),
        (b"\xff", "not_utf8"),
        (b"[]", "not_object"),
        (b"{}", "no_message_id"),
        (event(5), "message_id_not_string"),
        (event(""), "empty_message_id"),
        (event("x" * 300), "message_id_too_long"),
        (event("big") + b" " * 40_000, "too_large"),
    ],
)
async def test_bad_input_goes_to_the_dead_letter_topic_with_its_reason(
    value: bytes | None, reason: str
) -> None:
    msg = Msg(SETTINGS.input_topic, 5, 42, b"k", value, [("orig", b"1")])
    outcomes, txn, table = await run(msg)
    assert outcomes == [RecordOutcome.DEAD_LETTERED]
    [sent] = txn.sent
    assert (sent.topic, sent.key, sent.value, sent.partition) == (
        SETTINGS.dlq_topic,
        b"k",
        value,
        5,
    )
    assert sent.headers[0] == ("orig", b"1")
    headers = dict(sent.headers)
    assert headers[rules.ERROR_HEADER] == reason.encode()
    assert headers[rules.SOURCE_TOPIC_HEADER] == SETTINGS.input_topic.encode()
    assert headers[rules.SOURCE_PARTITION_HEADER] == b"5"
    assert headers[rules.SOURCE_OFFSET_HEADER] == b"42"
    assert table.first == {}


async def test_a_copy_after_the_window_is_forwarded_again() -> None:
    w = SETTINGS.window
    outcomes, txn, _ = await run(
        placed("m-4"),
        placed("m-4", timestamp=1_790_000_000_123 + round(w * 1000) - 1),
        placed("m-4", timestamp=1_790_000_000_123 + round(w * 1000)),
    )
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.FORWARDED]
    assert len(txn.sent) == 2


async def test_event_time_can_drive_the_window() -> None:
    settings = Settings.from_env({"DEDUPE_PARTITIONS": "8", "DEDUPE_TIME_SOURCE": "event"})
    body = json.dumps(
        {"messageId": "m-5", "timestamp": "2026-09-21T12:00:00Z", "type": "track"}
    ).encode()
    msg = placed("m-5", value=body)
    _, _, seen = await run(msg, settings=settings)
    noon = int(datetime(2026, 9, 21, 12, tzinfo=UTC).timestamp() * 1000)
    assert seen.first[b"m-5"] == noon  # the event's time, not the Kafka timestamp


# --- the native messageId scan --------------------------------------------------------------


def through(settings: Settings, scan: bool, msgs: list[Msg]) -> tuple[list[str], list[Sent]]:
    """The batch handled as ``dedupe_batch`` hands it over: ids found by the native scan first
    (when ``scan`` and the settings use it), then each record."""
    dedup = Deduplicator(
        settings,
        FakeSeenIds(),  # type: ignore[arg-type]
        message_ids=dedupe_native.message_ids if scan else None,
    )
    txn = FakeTxn()

    async def run() -> list[str]:
        ids = dedup.message_ids(msgs) or [None] * len(msgs)  # type: ignore[arg-type]
        return [
            await dedup.handle(txn, m, record_ms(m), None, None, i)  # type: ignore[arg-type]
            for m, i in zip(msgs, ids, strict=True)
        ]

    return asyncio.run(run()), txn.sent


def mixed_batch() -> list[Msg]:
    """First sightings, repeats, bad input of every kind, an id with escapes, a record keyed
    by another id, a tombstone."""
    msgs = [placed(f"m-{i}") for i in range(6)] + [placed("m-1"), placed("m-4")]
    p = msgs[0].partition
    t = SETTINGS.input_topic
    msgs += [
        Msg(t, p, 8, b"x", b"not json"),
        Msg(t, p, 9, b"x", b"[1, 2]"),
        Msg(t, p, 10, b"x", b'{"type": "track"}'),
        Msg(t, p, 11, b"x", b'{"messageId": 5}'),
        Msg(t, p, 12, b"x", b'{"messageId": ""}'),
        Msg(t, p, 13, b"x", None),
        Msg(t, p, 14, b"x", b'{"messageId": NaN}'),
        placed("caf\u00e9", json.dumps({"messageId": "caf\u00e9"}).encode()),
        placed('a"b', json.dumps({"messageId": 'a"b'}).encode()),
        Msg(t, p, 15, b"other-key", event("m-2")),  # misplaced: re-keyed
        placed("m-5", event("m-5")),
    ]
    return msgs


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DEDUPE_MISSING_ID": "fingerprint"},
        {"DEDUPE_VERIFY_CONTENT": "true"},
        {"DEDUPE_TIME_SOURCE": "event"},
    ],
)
def test_the_native_scan_decides_and_sends_as_inspect_does(env: dict[str, str]) -> None:
    settings = Settings.from_env({"DEDUPE_PARTITIONS": "8", **env})
    assert through(settings, True, mixed_batch()) == through(settings, False, mixed_batch())


def test_the_scan_is_used_only_where_the_id_alone_decides() -> None:
    def scans(env: dict[str, str]) -> bool:
        s = Settings.from_env({"DEDUPE_PARTITIONS": "8", **env})
        return Deduplicator(s, FakeSeenIds(), message_ids=dedupe_native.message_ids).scans_ids  # type: ignore[arg-type]

    assert scans({})
    assert scans({"DEDUPE_MISSING_ID": "fingerprint"})
    assert not scans({"DEDUPE_VERIFY_CONTENT": "true"})  # the content hash needs the document
    assert not scans({"DEDUPE_TIME_SOURCE": "event"})  # the event's timestamp too
    assert not scans({"DEDUPE_STRATEGY": "producer_sequence"})
    assert not Deduplicator(SETTINGS, FakeSeenIds()).scans_ids  # type: ignore[arg-type]


# --- the batch path (Deduplicator.handle_batch) against the per-record reference -------------


class FakeBatch(FakeTxn):
    """``TaskBatch`` as ``handle_batch`` uses it: every record delivered, in spans; a span's
    first sightings sent together (``send_records``; the real one, with the output batches it
    fills, is in tests/unit/app/eos/test_batch_path.py)."""

    def __init__(self, msgs: list[Msg]) -> None:
        super().__init__()
        self.msgs = msgs
        self.sends = 0  # send_records calls

    async def spans(self):  # type: ignore[no-untyped-def]
        # Spans of a few records each, as the real batch cuts them (at gaps and every
        # YIELD_EVERY records): the loop must carry nothing over from one span to the next.
        for start in range(0, len(self.msgs), 7):
            yield start, min(start + 7, len(self.msgs))

    async def send_records(self, topic, partition, records):  # type: ignore[no-untyped-def]
        self.sends += 1
        for timestamp_ms, key, value, headers in records:
            self.sent.append(Sent(topic, key, value, list(headers or []), timestamp_ms, partition))


class PrefetchingSeenIds(FakeSeenIds):
    def __init__(self) -> None:
        super().__init__()
        self.prefetched: list[list[bytes]] = []

    def prefetch(self, partition: int, ids: list[bytes]) -> None:
        self.prefetched.append(ids)


def by_batch(settings: Settings, msgs: list[Msg]) -> tuple[object, ...]:
    """The batch as ``dedupe_batch`` hands it over: ``handle_batch`` with the native scan."""
    seen = PrefetchingSeenIds()
    dedup = Deduplicator(settings, seen, message_ids=dedupe_native.message_ids)  # type: ignore[arg-type]
    batch = FakeBatch(msgs)
    outcomes: Counter[str] = Counter()
    tally: Counter[tuple[str, str]] = Counter()
    asyncio.run(dedup.handle_batch(batch, msgs, outcomes, tally))  # type: ignore[arg-type]
    assert seen.prefetched == [[m.key or b"" for m in msgs]]
    return +outcomes, +tally, batch.sent, seen.first, seen.aged_at


def one_by_one(settings: Settings, msgs: list[Msg]) -> tuple[object, ...]:
    """The reference: each record through ``handle``, every value inspected (no scan)."""
    seen = FakeSeenIds()
    dedup = Deduplicator(settings, seen)  # type: ignore[arg-type]
    txn = FakeTxn()
    outcomes: Counter[str] = Counter()
    tally: Counter[tuple[str, str]] = Counter()

    async def run() -> None:
        for m in msgs:
            outcomes[await dedup.handle(txn, m, record_ms(m), None, tally)] += 1  # type: ignore[arg-type]

    asyncio.run(run())
    return +outcomes, +tally, txn.sent, seen.first, seen.aged_at


IDS = [f"id-{n}" for n in range(12)] + ["caf\u00e9", 'q"uote']
HEADERS = [
    [],
    [("h", b"1")],
    [(strategy.SOURCE_HEADER, b"web")],
    [(strategy.SOURCE_HEADER, b"bad source!")],
    [(strategy.PRODUCER_HEADER, b"p1"), (strategy.SEQUENCE_HEADER, b"3")],
]


@st.composite
def batches(draw: st.DrawFn) -> list[Msg]:
    """One partition's records: ids from a small pool (so repeats), keyed by their id or not,
    with and without headers, bad values and tombstones, timestamps absent, zero or set; the
    partition is the first id's home, so other ids' records are misplaced."""
    partition = rules.partition_for(draw(st.sampled_from(IDS)).encode(), SETTINGS.partitions)
    msgs = []
    for offset in range(draw(st.integers(1, 40))):
        mid = draw(st.sampled_from(IDS))
        value = draw(
            st.sampled_from(
                [json.dumps({"type": "track", "messageId": mid}).encode()] * 4
                + [b"not json", b'{"messageId": 5}', b'{"type": "track"}', None]
            )
        )
        key = draw(st.sampled_from([mid.encode()] * 4 + [None, b"other"]))
        msgs.append(
            Msg(
                SETTINGS.input_topic,
                partition,
                offset,
                key,
                value,
                draw(st.sampled_from(HEADERS[:1] * 4 + HEADERS[1:])),
                draw(st.sampled_from([1_790_000_000_000 + 1000 * offset] * 3 + [-1, 0])),
            )
        )
    return msgs


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"DEDUPE_MISSING_ID": "fingerprint"},
        {"DEDUPE_WINDOW_FROM": "last_seen"},
        {"DEDUPE_SCOPE": "source"},
        {"DEDUPE_STRATEGY": "off"},
        {"DEDUPE_SOURCE_POLICIES": "web=off"},
        {"DEDUPE_VERIFY_CONTENT": "true"},
    ],
)
@given(msgs=batches())
@hypothesis_settings(max_examples=60, deadline=None)
def test_the_batch_path_decides_counts_and_sends_as_handle_does(
    env: dict[str, str], msgs: list[Msg]
) -> None:
    """Outcomes, per-strategy tallies, sends (topic, key, value, headers, timestamp,
    partition, in order), the table's first sightings and every age-out call: the same through
    ``handle_batch`` (the scan, runs decided and sent together, spans) as through ``handle``
    record by record with every value inspected."""
    settings = Settings.from_env({"DEDUPE_PARTITIONS": "8", **env})
    assert by_batch(settings, msgs) == one_by_one(settings, msgs)


def test_the_batch_path_takes_placed_records_without_headers_inline() -> None:
    """Where the inline path runs: placed records without strategy headers are decided as a
    run and their first sightings sent in one ``send_records``, other headers kept."""
    msgs = [placed("m-1"), placed("m-1"), placed("m-2", headers=[("h", b"1")])]
    msgs = [m for m in msgs if m.partition == msgs[0].partition]
    for offset, m in enumerate(msgs):
        m.offset = offset
    batch = FakeBatch(msgs)
    dedup = Deduplicator(SETTINGS, PrefetchingSeenIds(), message_ids=dedupe_native.message_ids)  # type: ignore[arg-type]
    outcomes: Counter[str] = Counter()
    asyncio.run(dedup.handle_batch(batch, msgs, outcomes, Counter()))  # type: ignore[arg-type]
    assert outcomes[RecordOutcome.FORWARDED] == len(msgs) - 1
    assert outcomes[RecordOutcome.DUPLICATE] == 1
    assert batch.sends == 1
    assert [s.headers for s in batch.sent] == [[]] + [[("h", b"1")]] * (len(msgs) - 2)


class FailingBatch(FakeBatch):
    """A batch whose second ``send_records`` fails (a transaction error)."""

    async def send_records(self, topic, partition, records):  # type: ignore[no-untyped-def]
        if self.sends == 1:
            raise RuntimeError("the transaction failed")
        await super().send_records(topic, partition, records)


def test_a_batch_that_fails_midway_counts_what_it_decided_and_handed_over() -> None:
    """When a send fails midway (the agent counts a batch whose transaction error it absorbs),
    the inline path has counted each repeat once decided, as handle() does, and each first
    sighting once its run's sends were handed to the batch: the failed run's first sightings
    are not counted, as handle() counts no record whose send failed."""
    msgs = [placed(f"m-{n}") for n in range(200)]
    msgs = [m for m in msgs if m.partition == msgs[0].partition]
    msgs = [msgs[0], msgs[0], *msgs[1:]]  # a repeat in the first span (of 7)
    msgs = [dataclasses.replace(m, offset=offset) for offset, m in enumerate(msgs)]
    assert len(msgs) > 14
    dedup = Deduplicator(SETTINGS, PrefetchingSeenIds(), message_ids=dedupe_native.message_ids)  # type: ignore[arg-type]
    outcomes: Counter[str] = Counter()
    with pytest.raises(RuntimeError):
        asyncio.run(dedup.handle_batch(FailingBatch(msgs), msgs, outcomes, Counter()))  # type: ignore[arg-type]
    assert +outcomes == Counter({RecordOutcome.FORWARDED: 6, RecordOutcome.DUPLICATE: 1})
