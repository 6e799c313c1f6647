"""``python -m ingest``: run the HTTP ingest service (the Procfile's ``web:`` process).

Settings come from the environment (README, "HTTP ingest (Segment-compatible)"); an invalid one
stops the service at once with exit status 2 and a message naming the variable. With a local
broker and a worker running (``make run``)::

    DEDUPE_WRITE_KEYS=my-key python -m ingest          # or: make web

You should see "producing to 'events' (8 partitions) on localhost:9092: acks=all, idempotent"
and then "listening on http://127.0.0.1:8080". Send an event the way a Segment SDK does::

    curl -s -u my-key: -H 'Content-Type: application/json' \\
         -d '{"userId": "u1", "event": "Signed Up"}' http://127.0.0.1:8080/v1/track

which answers ``{"success": true}`` once Kafka acknowledged it; ``make verify`` then counts it
in the clean topic. Without ``DEDUPE_WRITE_KEYS`` the service is open and says so with a
warning. It exits with status 1 when Kafka or the input topic cannot be reached within
DEDUPE_INGEST_STARTUP_TIMEOUT, or the port is taken. SIGTERM or Ctrl-C stops it gracefully
(requests in flight are answered, the producer is flushed).
"""

from __future__ import annotations

import logging
import sys

from aiohttp import web

from ingest.app import create_app
from ingest.settings import IngestSettings, SettingsError
from ingest.sink import StartupError

log = logging.getLogger("ingest")


def _announce(text: str) -> None:
    """aiohttp's "Running on ..." line, as a log line."""
    first = text.splitlines()[0].strip("= ")
    log.info("listening on %s", first.removeprefix("Running on "))


def main() -> int:
    try:
        settings = IngestSettings.from_env()
    except SettingsError as exc:
        print(f"dedupe-ingest: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="[%(asctime)s] [%(process)d] [%(levelname)s] %(name)s: %(message)s",
    )
    try:
        web.run_app(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            access_log=None,
            print=_announce,
        )
    except StartupError as exc:
        print(f"dedupe-ingest: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"dedupe-ingest: cannot listen on {settings.host}:{settings.port}: {exc}",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
