"""The alert rules, deploy/prometheus/alerts.yml, with their runbook links under another base.

    python -m scripts.alert_rules --runbook-base https://wiki.example/dedupe/operations.md
    python -m scripts.alert_rules --runbook-base URL --out /etc/prometheus/alerts.yml
    make alert-rules RUNBOOK_BASE=URL ALERT_RULES_OUT=/etc/prometheus/alerts.yml

Alertmanager shows ``runbook_url`` as a link, so it must be absolute. Every alert's link is
``<base>#<alert name in lower case>``: its section of docs/operations.md, or of wherever you
publish that page (its headings keep the anchors). The file in the repository carries
:data:`DEFAULT_BASE`, the page in the project's repository; this writes the rules with every
link moved to ``--runbook-base`` and nothing else changed (to standard output without
``--out``). tests/unit/deploy/test_alert_rules_static.py checks that every link of the file is
under the default base and names its own alert's section.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

from app.worker.record_sends import RecordOutcome

RULES = Path(__file__).resolve().parents[1] / "deploy" / "prometheus" / "alerts.yml"
#: docs/operations.md as the project's repository shows it.
DEFAULT_BASE = "https://github.com/dedupe/dedupe/blob/main/docs/operations.md"
#: The outcomes ``dedupe_records_total`` counts a write to the dead-letter topic under: bad input,
#: and (DEDUPE_VERIFY_CONTENT) an id reused with other content. DedupeDeadLetters and the
#: dashboard's "Dead-lettered per second" both select them with :data:`DEAD_LETTER_SELECTOR`,
#: so the two count the same writes. The rules file cannot import it:
#: tests/unit/deploy/test_alert_rules_static.py holds the alert to it, and this set to the
#: outcomes the worker returns after a dead-letter send.
DEAD_LETTER_OUTCOMES = (RecordOutcome.DEAD_LETTERED, RecordOutcome.REUSED)
DEAD_LETTER_SELECTOR = f'outcome=~"{"|".join(DEAD_LETTER_OUTCOMES)}"'
_LINK = re.compile(r"^(\s+runbook_url: )(\S+)#([\w-]+)$", re.M)


def links(text: str) -> list[tuple[str, str]]:
    """Each runbook link of a rules file as (base, anchor), in order."""
    return [(m.group(2), m.group(3)) for m in _LINK.finditer(text)]


def check_base(base: str) -> str:
    """``base`` without a trailing ``#``; ValueError unless it is an absolute http(s) URL."""
    base = base.rstrip("#")
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.fragment:
        raise ValueError(
            f"runbook base {base!r}: give an absolute http(s) URL of the runbook page, without "
            "an #anchor (each alert adds its own)"
        )
    return base


def render(base: str, text: str | None = None) -> str:
    """The rules (``text``, default: the repository's file) with every runbook link under
    ``base``."""
    base = check_base(base)
    source = RULES.read_text() if text is None else text
    return _LINK.sub(lambda m: f"{m.group(1)}{base}#{m.group(3)}", source)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runbook-base", default=DEFAULT_BASE, help="runbook page URL")
    parser.add_argument("--out", type=Path, help="file to write (default: standard output)")
    args = parser.parse_args(argv)
    try:
        text = render(args.runbook_base)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text)
        print(
            f"wrote {args.out} (runbook links under {check_base(args.runbook_base)})",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
