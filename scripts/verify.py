"""Verify the clean topic: read it with read_committed and count totals, distinct ids, duplicates.

Run it against the running pipeline (defaults from the same environment as the worker)::

    python -m scripts.verify                    # reads $DEDUPE_OUTPUT_TOPIC
    python -m scripts.verify --topic events-clean --bootstrap localhost:9092

You should see one line such as::

    events-clean: total=10060 distinct=10060 duplicates=0 (read_committed)

The exit status is 1 when any messageId appears more than once, 0 otherwise. As a library,
:func:`check` also compares against the expected set (missing, unexpected, changed bytes).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from app.settings import Settings
from scripts.topic_reader import Record, read_topic


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
) -> Report:
    """Compare the records of a clean topic with the expected ``key -> value bytes``."""
    counts = Counter(r.key for r in records if r.key is not None)
    dup_ids = [k for k, n in counts.items() if n > 1]
    report = Report(
        topic,
        total=len(records),
        distinct=len(counts),
        duplicates=sum(n - 1 for n in counts.values() if n > 1)
        + sum(r.key is None for r in records),
        duplicate_ids=dup_ids[:20],
    )
    if expected is not None:
        seen = set(counts)
        missing = [k for k in expected if k not in seen]
        unexpected = [k for k in seen if k not in expected]
        changed = [
            r.key
            for r in records
            if r.key in expected
            and (
                r.value != expected[r.key]
                or (expected_headers is not None and r.headers != expected_headers[r.key])
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
    bootstrap: str, topic: str, expected: Mapping[bytes, bytes] | None = None
) -> Report:
    return check(topic, await read_topic(bootstrap, topic), expected)


def main(argv: list[str] | None = None) -> int:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", default=settings.bootstrap_servers)
    parser.add_argument("--topic", default=settings.output_topic)
    args = parser.parse_args(argv)
    report = asyncio.run(verify_topic(args.bootstrap, args.topic))
    print(report.line())
    for example in report.examples:
        print("  " + example)
    return 0 if report.duplicates == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
