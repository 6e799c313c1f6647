"""The settings of the HTTP ingest service, read from the environment and validated at start-up.

Same pattern as the worker's ``app/settings/``: one field per knob, each with its environment
variable, default and meaning; ``IngestSettings.from_env()`` is called by ``python -m ingest``
(never at class-definition time), so tests build apps with their own settings. An invalid value
stops the process with exit status 2 and a message that names the variable.

Three variables are shared with the worker on purpose, so the two processes agree by
construction: ``KAFKA_BOOTSTRAP_SERVERS``, ``DEDUPE_INPUT_TOPIC`` (the ingest service produces
to the topic the worker reads) and ``DEDUPE_MAX_EVENT_BYTES`` / ``DEDUPE_MAX_MESSAGE_ID_BYTES``
(an event the ingest service accepts is never dead-lettered by the worker for its size or id).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from envsettings import SettingsError, secret, setting
from envsettings.kafka_security import SECURITY_FIELDS, KafkaSecuritySettings
from ingest.cors import CorsPolicy, origin_problems

__all__ = ["IngestSettings", "SettingsError"]

#: Segment's documented limits: 32 KB per event, 500 KB per batch request, 2500 events a batch.
SEGMENT_MAX_EVENT_BYTES = 32 * 1024
SEGMENT_MAX_BATCH_BYTES = 500 * 1024
SEGMENT_MAX_BATCH_EVENTS = 2500

_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,200}$")


@dataclass(frozen=True)
class IngestSettings(KafkaSecuritySettings):
    """Every setting of the ingest service. Build with :meth:`from_env`; validated on creation."""

    host: str = setting(
        "127.0.0.1",
        "DEDUPE_INGEST_HOST",
        "Address the ingest service binds to (0.0.0.0 for every interface).",
    )
    port: int = setting(8080, "PORT", "TCP port the ingest service listens on.", within=(1, 65535))
    bootstrap_servers: str = setting(
        "localhost:9092", "KAFKA_BOOTSTRAP_SERVERS", "Kafka brokers, comma-separated host:port."
    )
    input_topic: str = setting(
        "events",
        "DEDUPE_INPUT_TOPIC",
        "Topic the events are produced to (the worker's input), keyed by messageId.",
    )
    write_keys: str = setting(
        "",
        "DEDUPE_WRITE_KEYS",
        "Accepted write keys, comma-separated (HTTP Basic user name or the body's 'writeKey'). "
        "'source:key' also names the key's source: its events carry the header dedupe.source "
        "(the worker's DEDUPE_SOURCE_POLICIES and DEDUPE_SCOPE read it). Empty: no "
        "authentication, and a warning at start-up.",
    )
    metrics_token: str = secret(
        "",
        "DEDUPE_INGEST_METRICS_TOKEN",
        "Token GET /metrics requires: 'Authorization: Bearer <token>' or the password "
        "of Basic auth (envsettings/tokens.py). Empty: open to anyone who reaches "
        "the port. /v1/ (write keys), /health and /ready are not affected.",
    )
    cors_origins: str = setting(
        "*",
        "DEDUPE_INGEST_CORS_ORIGINS",
        "Origins whose web pages may call the service from a browser (CORS: preflights "
        "answered, answers readable), comma-separated scheme://host[:port]. '*': any origin, "
        "as Segment's API (the write key is the credential; cookies are never allowed). "
        "'none': no origin.",
    )
    max_event_bytes: int = setting(
        SEGMENT_MAX_EVENT_BYTES,
        "DEDUPE_MAX_EVENT_BYTES",
        "Largest event, serialized as produced to Kafka (Segment's 32 KB); a larger one fails "
        "its request with 400. Shared with the worker.",
        within=(64, 16 * 2**20),
    )
    max_message_id_bytes: int = setting(
        256,
        "DEDUPE_MAX_MESSAGE_ID_BYTES",
        "Longest accepted messageId, in UTF-8 bytes; a longer one fails its request with 400. "
        "Shared with the worker.",
        within=(1, 4096),
    )
    max_batch_bytes: int = setting(
        SEGMENT_MAX_BATCH_BYTES,
        "DEDUPE_INGEST_MAX_BATCH_BYTES",
        "Largest request body after gzip decompression (Segment's 500 KB); larger is 413.",
    )
    max_batch_events: int = setting(
        SEGMENT_MAX_BATCH_EVENTS,
        "DEDUPE_INGEST_MAX_BATCH_EVENTS",
        "Most events in one /v1/batch request (Segment's 2500); more is 400.",
        within=(1, 100_000),
    )
    ack_timeout: float = setting(
        10.0,
        "DEDUPE_INGEST_ACK_TIMEOUT",
        "How long a request waits for Kafka to acknowledge all its events before it answers "
        "503 (the client retries; copies are dropped downstream). Keep it below the clients' "
        "HTTP timeout (15s in Segment's SDKs).",
        within=(0.1, 300.0),
    )
    startup_timeout: float = setting(
        60.0,
        "DEDUPE_INGEST_STARTUP_TIMEOUT",
        "How long start-up waits for Kafka and the input topic (the first worker creates it) "
        "before the service exits with an error.",
        within=(1.0, 3600.0),
    )
    ready_timeout: float = setting(
        1.0,
        "DEDUPE_INGEST_READY_TIMEOUT",
        "How long GET /ready waits for Kafka to answer a metadata request for the input topic "
        "before it answers 503 (not ready). Keep it below the load balancer's check timeout.",
        within=(0.1, 60.0),
    )
    linger: float = setting(
        0.005,
        "DEDUPE_INGEST_LINGER",
        "Producer linger: how long the producer waits to fill a Kafka batch (duration).",
        within=(0.0, 1.0),
    )
    log_level: str = setting("info", "DEDUPE_LOG_LEVEL", "Log level of the ingest service.")
    crash_after_acks: int = setting(
        0,
        "DEDUPE_INGEST_CRASH_AFTER_ACKS",
        "Fault tests only: the process exits at once (like kill -9) right after Kafka "
        "acknowledged its Nth successful request, before answering it. 0 (off) in production.",
    )

    def __post_init__(self) -> None:
        self.check(self._problems())

    def _problems(self) -> list[str]:
        out = self.kafka_security_problems()

        env = self.env_of
        if not self.host.strip():
            out.append(f"{env('host')} must name an address to bind to (e.g. 127.0.0.1)")
        if not any(part.strip() for part in self.bootstrap_servers.split(",")):
            out.append(f"{env('bootstrap_servers')} must name at least one broker")
        if not _TOPIC.match(self.input_topic):
            out.append(f"{env('input_topic')}={self.input_topic!r}: use 1-200 of [A-Za-z0-9._-]")
        for source in self.write_key_sources.values():
            if source is not None and not 1 <= len(source.encode()) <= 255:
                out.append(f"{env('write_keys')}: a source name must be 1-255 bytes")
                break
        out.extend(origin_problems(self.cors_origins, env("cors_origins")))
        for key in self.write_key_list:
            if ":" in key or any(c.isspace() for c in key):
                out.append(
                    f"{env('write_keys')}: a key may not contain ':' or blanks "
                    "(it is sent as the HTTP Basic user name)"
                )
                break
        if not self.max_event_bytes <= self.max_batch_bytes <= 64 * 1024 * 1024:
            out.append(
                f"{env('max_batch_bytes')}={self.max_batch_bytes}: must be "
                f"{env('max_event_bytes')} ({self.max_event_bytes})..64MiB"
            )
        if self.log_level.lower() not in {"debug", "info", "warning", "error", "critical"}:
            out.append(f"{env('log_level')}={self.log_level!r}: debug|info|warning|error|critical")
        if self.crash_after_acks < 0:
            out.append(
                f"{env('crash_after_acks')}={self.crash_after_acks}: must be 0 (off) or more"
            )
        return out

    @property
    def cors_policy(self) -> CorsPolicy:
        """Which origins' pages may send events (ingest/cors.py)."""
        return CorsPolicy.parse(self.cors_origins)

    @property
    def write_key_list(self) -> frozenset[str]:
        """The accepted write keys; empty means the service is open."""
        return frozenset(self.write_key_sources)

    @property
    def write_key_sources(self) -> dict[str, str | None]:
        """Write key -> its source name (None when the entry names none)."""
        out: dict[str, str | None] = {}
        for entry in self.write_keys.split(","):
            source, sep, key = entry.strip().partition(":")
            if not sep:
                source, key = "", source
            if key.strip():
                out[key.strip()] = source.strip() or None
        return out


def settings_table() -> str:
    """The markdown table of these settings in docs/settings.md (``python -m ingest.settings``
    prints it)."""
    defaults = IngestSettings()
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, _, doc in IngestSettings.documented():
        if name in SECURITY_FIELDS:  # in the shared table of docs/settings.md
            continue
        value = getattr(defaults, name)
        if isinstance(value, float):
            shown = f"`{value * 1000:g}ms`" if value < 1 else f"`{value:g}s`"
        else:
            shown = f"`{value}`" if value != "" else "(empty)"
        rows.append(f"| `{doc.env}` | {shown} | {doc.help} |")
    return "\n".join(rows)


if __name__ == "__main__":  # python -m ingest.settings: print the table of docs/settings.md
    print(settings_table())
