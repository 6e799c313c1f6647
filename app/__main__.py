"""``python -m app worker``: start a dedup worker (Faust's worker command line);
``python -m app snapshot --to DIR`` / ``restore --from DIR``: state as files
(app/admin/snapshots.py);
``python -m app plan --new-ids-per-second N --window 7d ...``: size a pipeline
(app/admin/capacity/report.py).
``python -m app grow --partitions M``: more partitions, the ids held kept (app/admin/grow.py).

Settings come from the environment (docs/settings.md); an invalid one stops the worker at once
with exit status 2 and a message naming the variable. The log level is DEDUPE_LOG_LEVEL unless
``-l``/``--loglevel`` is given. Two workers on one machine differ only in DEDUPE_DATA_DIR and
DEDUPE_WEB_PORT.

You should see Faust's start-up banner, "created ... topic" lines on the first start, then
"transactional producers ready for N partitions" and "[^Worker]: Ready".
"""

from __future__ import annotations

import signal
import sys
from types import FrameType

from app.settings import SettingsError


def _stopped_while_starting(signum: int, _frame: FrameType | None) -> None:
    """A stop request before the worker installed its own handlers: nothing is open yet (no
    transaction, no store), so the process ends with exit 0 like any clean stop, rather than
    by the signal (-15), which a supervisor reads as a crash."""
    print(f"dedupe: stopped by {signal.Signals(signum).name} while starting", file=sys.stderr)
    raise SystemExit(0)


def main() -> None:
    # Faust's worker replaces this with its own graceful stop once it runs.
    signal.signal(signal.SIGTERM, _stopped_while_starting)
    if sys.argv[1:2] == ["plan"]:
        from app.admin.capacity.report import main as plan

        raise SystemExit(plan(sys.argv[2:]))
    if sys.argv[1:2] == ["grow"]:
        from app.admin.grow import main as grow

        try:
            raise SystemExit(grow(sys.argv[1:]))
        except SettingsError as exc:
            print(f"dedupe: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    if sys.argv[1:2] in (["snapshot"], ["restore"]):
        from app.admin.snapshots import main as snapshots

        try:
            raise SystemExit(snapshots(sys.argv[1:]))
        except SettingsError as exc:
            print(f"dedupe: {exc}", file=sys.stderr)
            raise SystemExit(2) from None
    try:
        from app.worker.main import app, pipeline
    except SettingsError as exc:
        print(f"dedupe: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    args = sys.argv[1:]
    if args[:1] == ["worker"] and not any(
        a in ("-l", "--loglevel") or a.startswith("--loglevel=") for a in args
    ):
        sys.argv.append(f"--loglevel={pipeline.settings.log_level}")
    app.main()


if __name__ == "__main__":
    main()
