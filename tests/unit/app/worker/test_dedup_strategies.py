"""``Deduplicator.handle`` per strategy, with the transaction and tables in memory: which record
goes where, under which key and headers, and what each strategy counts."""

from __future__ import annotations

import json
from collections import Counter

from app import rules, strategy
from app.settings import Settings
from app.worker.dedup import Deduplicator, RecordOutcome, record_ms
from tables import producers
from tests.unit.app.worker.test_agent import FakeSeenIds, FakeTxn, Msg

BASE = {"DEDUPE_PARTITIONS": "8"}


class FakeProducers:
    """``ProducerSeqs``' decision in memory (no age-out)."""

    def __init__(self) -> None:
        self.held: dict[bytes, producers.ProducerState] = {}

    def advance(self, producer: bytes, sequence: int, record_ms: int, partition: int) -> bool:
        held = self.held.get(producer)
        if producers.is_repeat(held, sequence):
            return False
        self.held[producer] = producers.ProducerState(sequence, record_ms)
        return True


def settings(**env: str) -> Settings:
    return Settings.from_env({**BASE, **{f"DEDUPE_{k.upper()}": v for k, v in env.items()}})


def home(key: bytes) -> int:
    return rules.partition_for(key, 8)


def rec(key: bytes | None, value: bytes, headers: list[tuple[str, bytes]], **kw: object) -> Msg:
    """A record keyed by ``key`` in the partition ``key`` hashes to (or ``partition=``)."""
    partition = kw.pop("partition", home(key or b""))
    return Msg("events", partition, 1, key, value, headers, **kw)  # type: ignore[arg-type]


async def run(
    s: Settings, *msgs: Msg
) -> tuple[list[str], FakeTxn, FakeSeenIds, FakeProducers, Counter[tuple[str, str]]]:
    seen, prods, txn = FakeSeenIds(), FakeProducers(), FakeTxn()
    dedup = Deduplicator(s, seen, prods)  # type: ignore[arg-type]
    tally: Counter[tuple[str, str]] = Counter()
    outcomes = [await dedup.handle(txn, m, record_ms(m), None, tally) for m in msgs]  # type: ignore[arg-type]
    return outcomes, txn, seen, prods, tally


def ev(**fields: object) -> bytes:
    return json.dumps(fields).encode()


PS = [("dedupe.producer", b"billing-1"), ("dedupe.sequence", b"41")]


async def test_producer_sequence_records_are_decided_by_producer() -> None:
    msgs = [
        rec(b"billing-1", ev(n=1), PS),
        rec(b"billing-1", ev(n=2), PS),  # the same sequence again, other content: a repeat
        rec(b"billing-1", ev(n=3), [PS[0], ("dedupe.sequence", b"42")]),
        rec(b"billing-1", ev(n=4), [PS[0], ("dedupe.sequence", b"40")]),
    ]
    outcomes, txn, seen, prods, tally = await run(settings(), *msgs)
    assert outcomes == [
        RecordOutcome.FORWARDED,
        RecordOutcome.DUPLICATE,
        RecordOutcome.FORWARDED,
        RecordOutcome.DUPLICATE,
    ]
    assert [(s.key, s.value, s.partition) for s in txn.sent] == [
        (b"billing-1", ev(n=1), home(b"billing-1")),
        (b"billing-1", ev(n=3), home(b"billing-1")),
    ]
    assert prods.held[b"billing-1"].last_sequence == 42
    assert seen.first == {}  # no messageId state
    assert tally == Counter(
        {("producer_sequence", "forwarded"): 2, ("producer_sequence", "duplicates_dropped"): 2}
    )


async def test_producer_records_elsewhere_are_rekeyed_by_producer_with_their_headers() -> None:
    other = (home(b"billing-1") + 1) % 8
    msg = rec(b"m-1", ev(messageId="m-1"), PS, partition=other)
    outcomes, txn, *_ = await run(settings(), msg)
    assert outcomes == [RecordOutcome.REKEYED]
    [sent] = txn.sent
    assert (sent.topic, sent.key, sent.partition) == (
        settings().repartition_topic,
        b"billing-1",
        home(b"billing-1"),
    )
    assert sent.headers == PS


async def test_bad_producer_headers_are_dead_lettered_with_the_reason() -> None:
    msg = rec(b"billing-1", ev(n=1), [PS[0], ("dedupe.sequence", b"4x")])
    outcomes, txn, *_ = await run(settings(), msg)
    assert outcomes == [RecordOutcome.DEAD_LETTERED]
    headers = dict(txn.sent[0].headers)
    assert headers[rules.ERROR_HEADER] == b"bad_producer_sequence"
    assert b"not 1-19 ASCII digits" in headers[rules.DETAIL_HEADER]


async def test_a_policy_overrides_producer_headers() -> None:
    web = [("dedupe.source", b"web"), *PS]
    body = ev(messageId="m-1")
    outcomes, *_ = await run(
        settings(source_policies="web=message_id"), rec(b"m-1", body, web), rec(b"m-1", body, web)
    )
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE]


async def test_off_forwards_every_copy() -> None:
    body = ev(messageId="m-1")
    legacy = [("dedupe.source", b"legacy")]
    outcomes, txn, seen, _, tally = await run(
        settings(source_policies="legacy=off"), rec(b"m-1", body, legacy), rec(b"m-1", body, legacy)
    )
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.FORWARDED]
    assert len(txn.sent) == 2 and seen.first == {}
    assert tally == Counter({("off", "forwarded"): 2})
    # bad input is still bad input
    outcomes, *_ = await run(settings(strategy="off"), rec(b"x", b"not json", []))
    assert outcomes == [RecordOutcome.DEAD_LETTERED]


async def test_events_without_an_id_are_dead_lettered_by_default_and_fingerprinted_on_request() -> (
    None
):
    body = ev(type="track", event="Order Completed", sentAt="2026-01-01T00:00:00Z")
    retry = ev(sentAt="2026-01-01T00:00:09Z", event="Order Completed", type="track")
    outcomes, *_ = await run(settings(), rec(None, body, []))
    assert outcomes == [RecordOutcome.DEAD_LETTERED]

    exclude = strategy.field_list("sentAt,receivedAt,_metadata")
    fp = strategy.fingerprint(json.loads(body), exclude)
    other = ev(type="track", event="Order Refunded")
    fp2 = strategy.fingerprint(json.loads(other), exclude)
    key, key2 = fp.encode(), fp2.encode()
    outcomes, txn, seen, _, _ = await run(
        settings(missing_id="fingerprint"),
        rec(None, body, [], partition=(home(key) + 1) % 8),  # not keyed by it: re-keyed first
        rec(key, body, []),
        rec(key, retry, []),  # only an excluded field differs: the same event
        rec(key2, other, []),
    )
    assert outcomes == [
        RecordOutcome.REKEYED,
        RecordOutcome.FORWARDED,
        RecordOutcome.DUPLICATE,
        RecordOutcome.FORWARDED,
    ]
    rekeyed, forwarded = txn.sent[0], txn.sent[1]
    assert (rekeyed.key, rekeyed.partition, rekeyed.headers) == (key, home(key), [])
    assert (forwarded.key, forwarded.value) == (key, body)  # the first copy's bytes
    assert forwarded.headers == [("dedupe.fingerprint", key)]
    assert set(seen.first) == {strategy.fingerprint_key(fp), strategy.fingerprint_key(fp2)}


async def test_a_bad_message_id_is_not_fingerprinted() -> None:
    outcomes, txn, *_ = await run(
        settings(missing_id="fingerprint"), rec(b"k", ev(messageId=7), [])
    )
    assert outcomes == [RecordOutcome.DEAD_LETTERED]
    assert dict(txn.sent[0].headers)[rules.ERROR_HEADER] == b"message_id_not_string"


async def test_verify_content_dead_letters_a_reused_id_and_keeps_the_first() -> None:
    first = ev(messageId="m-1", event="Signed Up", sentAt="a")
    retry = ev(messageId="m-1", event="Signed Up", sentAt="b")  # the same event, retried
    reused = ev(messageId="m-1", event="Order Completed")
    msgs = [rec(b"m-1", v, []) for v in (first, retry, reused, retry)]
    outcomes, txn, *_ = await run(settings(verify_content="true"), *msgs)
    assert outcomes == [
        RecordOutcome.FORWARDED,
        RecordOutcome.DUPLICATE,
        RecordOutcome.REUSED,
        RecordOutcome.DUPLICATE,
    ]
    assert [s.topic for s in txn.sent] == ["events-clean", "events-dlq"]
    dlq = txn.sent[1]
    assert dlq.value == reused
    assert dict(dlq.headers)[rules.ERROR_HEADER] == b"messageId-reused"
    # without verification the reuse is dropped as a repeat (today's behaviour)
    outcomes, *_ = await run(settings(), *msgs)
    assert outcomes == [
        RecordOutcome.FORWARDED,
        RecordOutcome.DUPLICATE,
        RecordOutcome.DUPLICATE,
        RecordOutcome.DUPLICATE,
    ]


async def test_scope_source_keeps_the_same_id_from_two_sources_apart() -> None:
    body = ev(messageId="m-1")
    web, api = [("dedupe.source", b"web")], [("dedupe.source", b"api")]
    msgs = [rec(b"m-1", body, web), rec(b"m-1", body, api), rec(b"m-1", body, web)]
    outcomes, _, seen, _, _ = await run(settings(scope="source"), *msgs)
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE]
    assert set(seen.first) == {
        strategy.scoped_key(b"m-1", b"web"),
        strategy.scoped_key(b"m-1", b"api"),
    }
    outcomes, *_ = await run(settings(), *msgs)  # global scope: one event
    assert outcomes == [RecordOutcome.FORWARDED, RecordOutcome.DUPLICATE, RecordOutcome.DUPLICATE]
    outcomes, txn, *_ = await run(
        settings(scope="source"), rec(b"m-1", body, [("dedupe.source", b"")])
    )
    assert outcomes == [RecordOutcome.DEAD_LETTERED]
    assert dict(txn.sent[0].headers)[rules.ERROR_HEADER] == b"bad_source"
