"""Verify the pipeline: read the clean topic with read_committed and check it is exactly once.

Run it against the running pipeline (defaults from the same environment as the worker)::

    python -m scripts.verify                 # the clean topic: total, distinct ids, duplicates
    python -m scripts.verify --full          # everything below, against the input topic

You should see one line such as::

    events-clean: total=10500 distinct=10500 duplicates=0 (read_committed)

and with ``--full`` one line per check, ending in ``exactly-once: OK``. The exit status is 1
when any check fails (any id twice, and with ``--full`` any failed check).

A record of the clean topic is one event by its decision key (``identity_of``): its key (the
messageId or fingerprint), within its source with ``DEDUPE_SCOPE=source``, and for producer
sequences the producer and sequence (their headers).

``--full`` derives what the clean and dead-letter topics must hold from the input topic itself,
with the worker's own validation rules and strategies (an independent oracle for a run whose
repeats all fall inside the window and under the size cap, and whose producers write their
sequences in order; the ``off`` policy and content verification are not modelled), and checks:

- each expected event exactly once in the clean topic, nothing unexpected, the value bytes of a
  copy of that id (every copy carries the same bytes in our streams; ``--first-copy`` requires
  the bytes of the first copy in input order);
- the dead-letter topic holds each bad input record exactly once (by source partition/offset);
- the group's committed offsets reach the input topic's end offsets (nothing left unprocessed);
- no transaction of the app is left open (Kafka's own transactions tool, when available).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiokafka.structs import TopicPartition

from app import rules
from app.settings import Settings
from scripts.open_transactions import open_transactions
from scripts.refusal import REFUSALS, refusal_message
from scripts.topic_reader import Record, committed_offsets, end_offsets, read_topic
from scripts.verify_oracle import expected_from_input, identity_of


@dataclass
class Report:
    topic: str
    total: int
    distinct: int
    duplicates: int
    duplicate_ids: list[bytes] = field(default_factory=list)
    missing: int = 0
    unexpected: int = 0
    changed: int = 0
    examples: list[str] = field(default_factory=list)

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.missing or self.unexpected or self.changed)

    def line(self) -> str:
        text = (
            f"{self.topic}: total={self.total} distinct={self.distinct} "
            f"duplicates={self.duplicates}"
        )
        if self.missing or self.unexpected or self.changed:
            text += f" missing={self.missing} unexpected={self.unexpected} changed={self.changed}"
        return text + " (read_committed)"


def check(
    topic: str,
    records: list[Record],
    expected: Mapping[bytes, bytes] | None = None,
    expected_headers: Mapping[bytes, tuple[tuple[str, bytes], ...]] | None = None,
    identity: Callable[[Record], bytes | None] | None = None,
) -> Report:
    """Compare the records of a clean topic with the expected ``identity -> value bytes``;
    ``identity`` is the record's key unless given (:func:`identity_of`)."""
    key_of = identity or (lambda r: r.key)
    counts = Counter(k for k in map(key_of, records) if k is not None)
    dup_ids = [k for k, n in counts.items() if n > 1]
    report = Report(
        topic,
        total=len(records),
        distinct=len(counts),
        duplicates=sum(n - 1 for n in counts.values() if n > 1)
        + sum(key_of(r) is None for r in records),
        duplicate_ids=dup_ids[:20],
    )
    if expected is not None:
        seen = set(counts)
        missing = [k for k in expected if k not in seen]
        unexpected = [k for k in seen if k not in expected]
        changed = [
            k
            for r, k in zip(records, map(key_of, records), strict=True)
            if k in expected
            and (
                r.value != expected[k]
                or (expected_headers is not None and r.headers != expected_headers[k])
            )
        ]
        report.missing, report.unexpected, report.changed = (
            len(missing),
            len(unexpected),
            len(changed),
        )
        for label, keys in (("missing", missing), ("unexpected", unexpected), ("changed", changed)):
            report.examples += [f"{label}: {k!r}" for k in keys[:5]]
    report.examples += [f"duplicate: {k!r} x{counts[k]}" for k in dup_ids[:5]]
    return report


async def verify_topic(
    bootstrap: str,
    topic: str,
    expected: Mapping[bytes, bytes] | None = None,
    identity: Callable[[Record], bytes | None] | None = None,
    client: Mapping[str, Any] | None = None,
) -> Report:
    records = await read_topic(bootstrap, topic, client=client)
    return check(topic, records, expected, identity=identity)


# --- the full check ------------------------------------------------------------------------


@dataclass
class FullReport:
    clean: Report
    dead_letters: int
    dead_letter_problems: list[str]
    unprocessed: dict[str, int]
    open_transactions: list[str] | None

    @property
    def ok(self) -> bool:
        return (
            self.clean.exactly_once
            and not self.dead_letter_problems
            and not self.unprocessed
            and not self.open_transactions
        )

    def lines(self) -> list[str]:
        out = [self.clean.line(), *("  " + e for e in self.clean.examples)]
        out.append(
            f"dead-letter: {self.dead_letters} records, "
            + ("OK" if not self.dead_letter_problems else "; ".join(self.dead_letter_problems[:5]))
        )
        out.append(
            "committed offsets: "
            + ("reach the input's end" if not self.unprocessed else f"behind {self.unprocessed}")
        )
        if self.open_transactions is None:
            out.append("open transactions: not checked (no Kafka tools)")
        else:
            out.append(f"open transactions: {self.open_transactions or 'none'}")
        out.append(f"exactly-once: {'OK' if self.ok else 'FAILED'}")
        return out


async def verify_pipeline(
    settings: Settings, *, first_copy: bool = False, check_transactions: bool = True
) -> FullReport:
    """Every check of ``--full`` for the pipeline of ``settings``."""
    bootstrap = settings.bootstrap_servers
    client = settings.kafka_client_kwargs()
    inputs = await read_topic(bootstrap, settings.input_topic, client=client)
    expected = expected_from_input(inputs, settings)
    clean_records = await read_topic(bootstrap, settings.output_topic, client=client)
    identity: Callable[[Record], bytes | None] = lambda r: identity_of(r, settings)  # noqa: E731
    if first_copy:
        clean = check(settings.output_topic, clean_records, expected.values, identity=identity)
    else:
        clean = check(settings.output_topic, clean_records, None, identity=identity)
        ids = {identity(r) for r in clean_records}
        missing = [k for k in expected.values if k not in ids]
        unexpected = [k for k in ids if k not in expected.values]
        by_id = {r.key: r.value for r in inputs if r.key is not None}
        changed = [
            k
            for r, k in zip(clean_records, map(identity, clean_records), strict=True)
            if k in expected.values
            and r.value != expected.values[k]
            and r.value != by_id.get(r.key)
        ]
        clean.missing, clean.unexpected, clean.changed = len(missing), len(unexpected), len(changed)
        clean.examples += [f"missing: {k!r}" for k in missing[:5]]
        clean.examples += [f"unexpected: {k!r}" for k in unexpected[:5]]
    dlq = await read_topic(bootstrap, settings.dlq_topic, client=client)
    sources = Counter(
        (
            int(dict(r.headers)[rules.SOURCE_PARTITION_HEADER]),
            int(dict(r.headers)[rules.SOURCE_OFFSET_HEADER]),
        )
        for r in dlq
        if dict(r.headers).get(rules.SOURCE_TOPIC_HEADER) == settings.input_topic.encode()
    )
    problems = [f"{src} x{n}" for src, n in sources.items() if n > 1]
    problems += [f"missing {src}" for src in sorted(expected.bad - set(sources))[:5]]
    problems += [f"unexpected {src}" for src in sorted(set(sources) - expected.bad)[:5]]
    committed = await committed_offsets(bootstrap, settings.app_id, client=client)
    unprocessed = {
        f"{settings.input_topic}-{p}": end
        - committed.get(TopicPartition(settings.input_topic, p), 0)
        for p, end in (await end_offsets(bootstrap, settings.input_topic, client=client)).items()
        if committed.get(TopicPartition(settings.input_topic, p), 0) < end
    }
    transactions = (
        open_transactions(
            bootstrap,
            f"{settings.app_id}-{settings.input_topic}-",
            settings.java_client_properties(),
        )
        if check_transactions
        else None
    )
    return FullReport(clean, len(dlq), problems, unprocessed, transactions)


def main(argv: list[str] | None = None) -> int:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=settings.bootstrap_servers)
    parser.add_argument("--topic", default=settings.output_topic)
    parser.add_argument("--full", action="store_true", help="every check, against the input")
    parser.add_argument("--first-copy", action="store_true", help="with --full: exact bytes")
    args = parser.parse_args(argv)
    try:
        return _verify(settings, args)
    except REFUSALS as exc:
        group = settings.app_id if args.full else None
        print(refusal_message(settings, args.bootstrap, exc, "verifier", group), file=sys.stderr)
        return 2


def _verify(settings: Settings, args: argparse.Namespace) -> int:
    if args.full:
        full = asyncio.run(verify_pipeline(settings, first_copy=args.first_copy))
        print("\n".join(full.lines()))
        return 0 if full.ok else 1
    report = asyncio.run(
        verify_topic(
            args.bootstrap,
            args.topic,
            identity=lambda r: identity_of(r, settings),
            client=settings.kafka_client_kwargs(),
        )
    )
    print(report.line())
    for example in report.examples:
        print("  " + example)
    return 0 if report.duplicates == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
