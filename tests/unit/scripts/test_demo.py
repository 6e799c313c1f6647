"""The demo's first run reads as success: each strategy it sends records for is one that the
worker's settings make work, and each line of its table says so (nothing dead-lettered but the
bad records). The figures fed to ``table`` are what a worker with those settings produces."""

from __future__ import annotations

import random
import re
from collections import Counter

from app.settings import Settings
from scripts.demo import KIND_HEADER, strategy_records, table

#: One line of the table: its strategy, forwarded and dead-lettered counts.
LINE = re.compile(r"^  (\w+)\s+sent\s+[\d,]+\s+forwarded\s+([\d,]+)\s.*dead-lettered ([\d,]+)")


def kinds(settings: Settings) -> Counter[str]:
    records = strategy_records(settings, random.Random(7))
    return Counter(dict(r.headers)[KIND_HEADER].decode() for r in records)


def test_make_run_and_make_demo_settings_send_and_show_fingerprints_as_success() -> None:
    settings = Settings.from_env({"DEDUPE_MISSING_ID": "fingerprint"})
    sent = kinds(settings)
    assert sent["fingerprint"] == 200  # 100 events without a messageId, each sent twice
    sent["message_id"] = 10_600
    out = Counter(message_id=10_000, producer_sequence=400, fingerprint=100)
    dead = Counter(message_id=5)
    lines = table(settings, sent, out, dead, bad=5)
    rows = {m[1]: m for line in lines if (m := LINE.match(line))}
    assert set(rows) == {"message_id", "producer_sequence", "fingerprint"}
    for kind, row in rows.items():
        assert int(row[2].replace(",", "")) > 0 and row[3] == "0", (kind, lines)
    at = next(i for i, line in enumerate(lines) if line.startswith("  fingerprint"))
    assert "dropped as duplicates 100" in lines[at]
    assert lines[at + 1].strip() == "(with DEDUPE_MISSING_ID=fingerprint)"
    assert not any("messageId are not sent" in line for line in lines)


def test_without_fingerprints_the_demo_sends_none_and_says_which_setting_shows_them() -> None:
    settings = Settings.from_env({})
    sent = kinds(settings)
    assert sent["fingerprint"] == 0
    sent["message_id"] = 10_600
    out = Counter(message_id=10_000, producer_sequence=400)
    lines = table(settings, sent, out, Counter(message_id=5), bad=5)
    assert not any(line.startswith("  fingerprint") for line in lines)
    assert any(
        "DEDUPE_MISSING_ID=fingerprint, as make run and make demo set it" in line for line in lines
    )
    for line in lines:
        if m := LINE.match(line):
            assert m[3] == "0", line
