"""``python -m app worker -l info``: start a dedup worker (Faust's worker command line).

Settings come from the environment (README, "Settings"). Two workers on one machine differ only
in DEDUPE_DATA_DIR and DEDUPE_WEB_PORT.
"""

from __future__ import annotations

import sys

from app.settings import SettingsError


def main() -> None:
    try:
        from app.main import app
    except SettingsError as exc:
        print(f"dedupe: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    app.main()


if __name__ == "__main__":
    main()
