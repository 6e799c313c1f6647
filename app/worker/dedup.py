"""``Deduplicator.handle``: one record, decided by its strategy (``app/strategy.py``) and sent
inside its task's transaction.

Every decision comes from ``app.rules``, ``app.strategy`` and the tables' pure rules; every send
and table write happens inside the record's task transaction (``app.eos``), so the record's
output, dead-letter or repartition record, its changelog records and its offset commit together
or not at all. What each strategy does with a record:

=====================  ====================================  ===========================
strategy               decided by (state)                    output key
=====================  ====================================  ===========================
message_id             messageId (``seen_ids``)              the messageId
message_id, no id      fingerprint (``seen_ids``), when       the fingerprint (32 hex)
                       DEDUPE_MISSING_ID=fingerprint
producer_sequence      producer's highest sequence            the producer name
                       (``producer_seqs``)
off                    nothing: every copy forwarded          the messageId or fingerprint
=====================  ====================================  ===========================

A record not keyed and placed by its decision key is re-keyed through the repartition topic
first, headers kept, so every copy meets the same partition's state. That holds for records
read from the repartition topic as well, which matters after the partition count grew
(``app/admin/grow.py``): one re-keyed under the old count goes round once more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from adapters.built_batches import Record
from app import rules, strategy
from app.eos import SourceRecord, TaskBatch, TaskTransaction
from app.settings import Settings
from app.strategy import NO_META, Meta, Strategy
from app.worker.record_sends import RecordOutcome, Sends
from tables.producers import ProducerSeqs
from tables.seen_ids import SeenIds
from tables.window import Verdict

# Module constants: read per record, faster than the enums' class attributes.
_PRODUCER_SEQUENCE, _OFF = Strategy.PRODUCER_SEQUENCE, Strategy.OFF
_MESSAGE_ID = Strategy.MESSAGE_ID
_REPEAT, _REUSED = Verdict.REPEAT, Verdict.REUSED
_NO_MESSAGE_ID = rules.BadInput.NO_MESSAGE_ID


#: Finds the messageIds of a batch of records (``dedupe_native.message_ids``): each id's bytes
#: where it is certain ``rules.inspect`` finds the value valid with that id, else None.
MessageIdScan = Callable[[list[SourceRecord], int, int], list[bytes | None]]


def record_ms(record: SourceRecord) -> int | None:
    """The Kafka timestamp of aiokafka's record (ms, -1: none); None when it has none."""
    return record.timestamp if record.timestamp >= 0 else None


class Deduplicator:
    """Handles one record inside its transaction. Counters are per partition, this process."""

    def __init__(
        self,
        settings: Settings,
        seen_ids: SeenIds,
        producers: ProducerSeqs | None = None,
        message_ids: MessageIdScan | None = None,
    ) -> None:
        self.settings = settings
        self.seen_ids = seen_ids
        self.producers = producers
        self.counts: dict[int, Counter[str]] = {}
        #: partition -> (strategy, outcome) -> records.
        self.by_strategy: dict[int, Counter[tuple[str, str]]] = {}
        self.max_future_ms = round(settings.max_future_skew * 1000)
        sends = Sends(settings)
        self._forward, self._rekey, self._dead_letter = (
            sends.forward,
            sends.rekey,
            sends.dead_letter,
        )
        self.policies = strategy.parse_policies(settings.source_policies)
        self.last_seen = settings.window_from == "last_seen"
        self.window_from = strategy.parse_window_from(settings.source_window_from)
        self.default = Strategy(settings.strategy)
        self.by_source = settings.scope == "source"
        self.fingerprints = settings.missing_id == "fingerprint"
        self.exclude = strategy.field_list(settings.fingerprint_exclude)
        self.verify = settings.verify_content
        self.kafka_time = settings.time_source == "kafka"
        self._partitions = settings.partitions
        self._max_event = settings.max_event_bytes
        self._max_id = settings.max_message_id_bytes
        # The native scan gives the id alone: used only where the decision needs nothing else
        # of the document (Kafka time, no content hash) and ids decide by default.
        needs_id_only = self.kafka_time and not self.verify
        self._scan = (
            message_ids if needs_id_only and self.default is not _PRODUCER_SEQUENCE else None
        )

    @property
    def scans_ids(self) -> bool:
        """Whether batches' messageIds are found by the native scan (:meth:`message_ids`)."""
        return self._scan is not None

    def message_ids(self, messages: list[SourceRecord]) -> list[bytes | None] | None:
        """The messageIds of a batch found by the native scan, in order (None for a record the
        scan leaves to ``rules.inspect``); None when the scan is not used."""
        if self._scan is None:
            return None
        return self._scan(messages, self._max_event, self._max_id)

    async def handle_batch(
        self,
        batch: TaskBatch,
        messages: list[SourceRecord],
        outcomes: Counter[str],
        tally: Counter[tuple[str, str]],
    ) -> None:
        """Decide and send the records of ``messages`` (the batch's: one partition's, in offset
        order) that ``batch.spans()`` gives, counting each outcome in ``outcomes`` and ``tally``
        (:meth:`handle`).

        The batch's keys are placed and looked up in bulk (one multi-get) and its messageIds
        found by the native scan first. The records ``batch.spans()`` gives are then taken in
        runs: a run of records whose id the scan found, without strategy headers
        (``dedupe.*``), keyed by that id in their home partition, is decided in one call
        (``SeenIds.decide_span``) and its first sightings sent in one call per output batch
        (``TaskBatch.send_records``), when the default strategy decides by id: the same
        decisions, table writes and sends, in the same order, as :meth:`handle` makes of them
        one by one (a unit property test holds the two to the same outcomes, bytes and
        headers). The record that ends a run goes through :meth:`handle`.
        """
        partition = messages[0].partition
        keys = [m.key or b"" for m in messages]
        homes = rules.partitions_for(keys, self._partitions)
        # The ids are the keys (records are keyed by messageId): one multi-get for the batch's
        # lookups; a record whose id is not its key is looked up on its own.
        self.seen_ids.prefetch(partition, keys)
        ids = self.message_ids(messages) or [None] * len(messages)
        handle = self.handle
        inline = self.default is _MESSAGE_ID  # else every record goes through handle()
        decide_span, read_meta = self.seen_ids.decide_span, strategy.read_meta
        send_records, topic = batch.send_records, self.settings.output_topic
        last_seen = self.last_seen
        forwarded = repeats = 0
        try:
            async for start, stop in batch.spans():
                i = start
                while i < stop:
                    # The run of records from i decided by their id alone: handle() and
                    # _decide() for them, in one decide_span. No strategy headers, so the
                    # default strategy, no source scope and the default window start; Kafka
                    # time (the scan's condition).
                    run_ids: list[bytes] = []
                    times: list[int] = []
                    j = i
                    while j < stop:
                        message = messages[j]
                        found = ids[j]
                        headers = message.headers
                        if (
                            found is None
                            or not inline
                            or message.key != found
                            or homes[j] != partition
                            or (headers and read_meta(headers) is not NO_META)
                        ):
                            break
                        run_ids.append(found)
                        timestamp = message.timestamp
                        times.append(timestamp if timestamp >= 0 else 0)
                        j += 1
                    if run_ids:
                        verdicts = decide_span(run_ids, times, partition, last_seen)
                        out: list[Record] = []  # the run's first sightings, sent together
                        for k, verdict in enumerate(verdicts, i):
                            if verdict is _REPEAT:
                                repeats += 1
                                continue
                            message = messages[k]
                            if verdict is _REUSED:
                                await send_records(topic, partition, out)  # in order
                                forwarded += len(out)
                                out = []
                                outcome = await self._reused(batch, message, record_ms(message))
                                outcomes[outcome] += 1
                                continue
                            timestamp = message.timestamp
                            stamp = timestamp if timestamp >= 0 else None
                            out.append((stamp, ids[k], message.value, message.headers))
                        await send_records(topic, partition, out)
                        forwarded += len(out)
                    if j < stop:  # the record that ended the run: the whole way
                        message = messages[j]
                        outcome = await handle(
                            batch, message, record_ms(message), homes[j], tally, ids[j]
                        )
                        outcomes[outcome] += 1
                        j += 1
                    i = j
        finally:
            # Counted as far as the batch got (sends as they were handed to the batch), even
            # when it ends in an error.
            outcomes[RecordOutcome.FORWARDED] += forwarded
            outcomes[RecordOutcome.DUPLICATE] += repeats

    def policy(self) -> dict[str, object]:
        """The policy in force, for ``/stats``."""
        s = self.settings
        return {
            "default": self.default.value,
            "sources": strategy.describe_policies(self.policies),
            "scope": s.scope,
            "missing_id": s.missing_id,
            "verify_content": self.verify,
            "window_from": s.window_from,
            "sources_window_from": {
                k.decode(): "last_seen" if v else "first_seen"
                for k, v in sorted(self.window_from.items())
            },
        }

    async def handle(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        timestamp_ms: int | None,
        key_partition: int | None = None,
        tally: Counter[tuple[str, str]] | None = None,
        message_id: bytes | None = None,
    ) -> str:
        """Decide ``message`` and send what it becomes; returns the outcome. ``timestamp_ms`` is
        its Kafka timestamp (None: it has none; see :func:`record_ms`); ``key_partition`` is the
        partition its key hashes to, when the caller computed it for a whole batch; ``tally``
        counts (strategy, outcome) of the records another strategy than the default decided
        (the rest are the default's: :meth:`count`); ``message_id`` is the id
        :meth:`message_ids` found (the value is then valid with that id: not inspected again).
        The message-id path is written out here, without further calls: it runs for every
        record."""
        headers = message.headers or ()
        meta = strategy.read_meta(headers) if headers else NO_META
        chosen = (
            self.default if meta is NO_META else strategy.choose(meta, self.policies, self.default)
        )
        if chosen is _PRODUCER_SEQUENCE:
            outcome = await self._by_producer(txn, message, meta, timestamp_ms, key_partition)
            if tally is not None and chosen is not self.default:
                tally[(chosen.value, outcome)] += 1
            return outcome
        value = message.value
        fingerprint = None
        if message_id is not None:
            key, doc = message_id, None
        elif isinstance(
            checked := rules.inspect(
                value, max_event_bytes=self._max_event, max_id_bytes=self._max_id
            ),
            rules.Valid,
        ):
            key, doc = checked.id_bytes, checked.doc
        elif checked.reason is _NO_MESSAGE_ID and self.fingerprints:
            assert value is not None
            doc = rules.parse_object(value)
            assert doc is not None  # inspect parsed it as an object without a messageId
            fingerprint = strategy.fingerprint(doc, self.exclude)
            key = fingerprint.encode()
            headers = [*headers, (strategy.FINGERPRINT_HEADER, key)]
        else:
            outcome = await self._dead_letter(txn, message, checked, timestamp_ms)
            if tally is not None and chosen is not self.default:
                tally[(chosen.value, outcome)] += 1
            return outcome
        # Repartition records are checked too: one re-keyed under an older partition count
        # (before ``python -m app grow``) sits where that count placed it, and its id's state now
        # lives elsewhere; under an unchanged count it is always in place (one hop at most).
        if rules.misplaced(message.key, message.partition, key, self._partitions, key_partition):
            # The fingerprint header is not sent on: the second pass computes it again.
            outcome = await self._rekey(txn, message, key, message.headers or (), timestamp_ms)
        elif chosen is _OFF:
            outcome = await self._forward(txn, message, key, headers, timestamp_ms)
        else:
            outcome = await self._decide(
                txn, message, meta, key, doc, fingerprint, headers, timestamp_ms
            )
        if tally is not None and chosen is not self.default:
            tally[(chosen.value, outcome)] += 1
        return outcome

    async def _decide(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        meta: Meta,
        key: bytes,
        doc: object,
        fingerprint: str | None,
        headers: Sequence[tuple[str, bytes]],
        timestamp_ms: int | None,
    ) -> str:
        """A message id or fingerprint against ``seen_ids``: forward, drop or refuse."""
        state_key, content = key, b""
        if fingerprint is not None:
            state_key = strategy.fingerprint_key(fingerprint)
        else:
            if self.by_source and meta.source is not None:
                bad = strategy.source_name(meta)
                if bad is not None:
                    invalid = rules.Invalid(rules.BadInput.BAD_SOURCE, bad)
                    return await self._dead_letter(txn, message, invalid, timestamp_ms)
                state_key = strategy.scoped_key(key, meta.source)
            if self.verify and isinstance(doc, dict):
                content = strategy.content_hash(doc, self.exclude)
        # record_ms() gives None for a record without a timestamp: time 0
        ms = (timestamp_ms or 0) if self.kafka_time else self._record_ms(timestamp_ms, doc)
        # The tables are co-partitioned with the record: its partition is theirs.
        seen = self.seen_ids
        last_seen = self.last_seen
        if self.window_from and meta.source is not None:
            last_seen = self.window_from.get(meta.source, last_seen)
        verdict = seen.decide(state_key, ms, message.partition, content, last_seen)
        seen.age_out(ms, message.partition)
        if verdict is _REPEAT:
            return RecordOutcome.DUPLICATE
        if verdict is _REUSED:
            return await self._reused(txn, message, timestamp_ms)
        return await self._forward(txn, message, key, headers, timestamp_ms)

    async def _reused(
        self, txn: TaskTransaction, message: SourceRecord, timestamp_ms: int | None
    ) -> str:
        reused = rules.Invalid(
            rules.BadInput.MESSAGE_ID_REUSED,
            "a copy inside the window has other content than the forwarded one",
        )
        await self._dead_letter(txn, message, reused, timestamp_ms)
        return RecordOutcome.REUSED

    def _record_ms(self, timestamp_ms: int | None, doc: object) -> int:
        kafka_ms = rules.clamp_ms(timestamp_ms or 0)
        if self.kafka_time:
            return kafka_ms
        stamp = doc.get("timestamp") if isinstance(doc, dict) else None
        return rules.event_time_ms(stamp, kafka_ms, self.max_future_ms)

    # -- producer sequences -----------------------------------------------------------------------

    async def _by_producer(
        self,
        txn: TaskTransaction,
        message: SourceRecord,
        meta: Meta,
        timestamp_ms: int | None,
        key_partition: int | None,
    ) -> str:
        s = self.settings
        parsed = strategy.producer_sequence(meta)
        if isinstance(parsed, str):
            bad = rules.Invalid(rules.BadInput.BAD_PRODUCER_SEQUENCE, parsed)
            return await self._dead_letter(txn, message, bad, timestamp_ms)
        checked = rules.inspect(
            message.value, max_event_bytes=s.max_event_bytes, max_id_bytes=s.max_message_id_bytes
        )
        if isinstance(checked, rules.Invalid) and checked.reason not in strategy.ID_ONLY_REASONS:
            return await self._dead_letter(txn, message, checked, timestamp_ms)
        key = parsed.producer
        headers = message.headers or ()
        if rules.misplaced(message.key, message.partition, key, s.partitions, key_partition):
            return await self._rekey(txn, message, key, headers, timestamp_ms)
        assert self.producers is not None
        doc = checked.doc if isinstance(checked, rules.Valid) else None
        if doc is None and not self.kafka_time and message.value is not None:
            doc = rules.parse_object(message.value)
        ms = self._record_ms(timestamp_ms, doc)
        if not self.producers.advance(key, parsed.sequence, ms, message.partition):
            return RecordOutcome.DUPLICATE
        return await self._forward(txn, message, key, headers, timestamp_ms)

    def count(
        self,
        partition: int,
        outcomes: Counter[str],
        tally: Counter[tuple[str, str]] | None = None,
    ) -> None:
        """Add a batch's ``outcomes``; ``tally`` holds those of records another strategy than
        the default decided (:meth:`handle`), the rest count for the default."""
        counter = self.counts.get(partition)
        if counter is None:
            counter = self.counts[partition] = Counter()
        counter.update(outcomes)
        by = self.by_strategy.get(partition)
        if by is None:
            by = self.by_strategy[partition] = Counter()
        default = Counter(outcomes)
        for (name, outcome), n in (tally or {}).items():
            by[(name, outcome)] += n
            default[outcome] -= n
        for outcome, n in default.items():
            if n:
                by[(self.default.value, outcome)] += n
