"""One settings object for the whole worker, read from the environment and validated at start-up.

Every knob is one field with its environment variable, default and meaning. ``Settings.from_env()``
is called by ``create_app`` (never at class-definition time), so tests and tools can build apps
with their own settings. An invalid value stops the process with a message that names the
variable, the value and what is accepted.

Faust reads a few environment variables on its own (``WORKDIR``, ``F_DATADIR``...); we pass every
Faust setting explicitly so those have no effect on the dedup worker.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from app.settings.checks import cross_checks
from app.settings.kafka import KafkaSettings
from app.settings.rocksdb import RocksDBSettings
from app.settings.state import StateSettings
from app.settings.strategy import StrategySettings
from app.settings.window import WindowSettings
from envsettings import EnvSettings, SettingsError, parse_duration, secret, setting
from tables.window import derived_bucket

__all__ = ["EnvSettings", "Settings", "SettingsError", "parse_duration", "setting"]


@dataclass(frozen=True)
class Settings(StateSettings, StrategySettings, RocksDBSettings, WindowSettings, KafkaSettings):
    """Every setting of the dedup worker. Build with :meth:`from_env`; validated on creation.

    Its sections are base classes, one module each (fields in this order): Kafka security
    (``envsettings/kafka_security.py``), Kafka (``app/settings/kafka.py``), window
    (``app/settings/window.py``), RocksDB tuning (``app/settings/rocksdb.py``), strategies
    (``app/settings/strategy.py``), standbys/restore/snapshots (``app/settings/state.py``), then
    the worker's own below. One object, so every problem of every section is reported at once.
    """

    SECTION: ClassVar[str] = "Data, web server, input limits, log"

    data_dir: Path = setting(
        Path("./data"),
        "DEDUPE_DATA_DIR",
        "Local state (RocksDB per partition). Safe to wipe: rebuilt from the changelog.",
    )
    web_host: str = setting(
        "127.0.0.1", "DEDUPE_WEB_HOST", "Address the worker's web server binds to."
    )
    web_port: int = setting(
        6066, "DEDUPE_WEB_PORT", "Port of the worker's web server.", within=(1, 65535)
    )
    web_advertised_host: str = setting(
        "",
        "DEDUPE_WEB_ADVERTISED_HOST",
        "Host the other workers reach this worker's web server at (GET /messages/{id} on any "
        "worker is forwarded to the owner of the id's partition). Empty: DEDUPE_WEB_HOST, or "
        "this machine's host name when that binds every interface (0.0.0.0, ::). In "
        "Kubernetes: the pod's IP (deploy/kubernetes/worker.yaml).",
    )
    web_token: str = secret(
        "",
        "DEDUPE_WEB_TOKEN",
        "Token the operator endpoints (/, /stats, /metrics, /messages, /producers) "
        "require: 'Authorization: Bearer <token>' or the password of Basic auth. "
        "Empty: open to anyone who reaches the port (a warning at start-up when it "
        "binds beyond loopback). /health and /ready stay open. Every worker of a "
        "group needs the same token.",
    )
    max_event_bytes: int = setting(
        32 * 1024,
        "DEDUPE_MAX_EVENT_BYTES",
        "Largest accepted event value in bytes (Segment's limit is 32 KB); larger values "
        "are dead-lettered.",
        within=(64, 16 * 2**20),
    )
    max_message_id_bytes: int = setting(
        256,
        "DEDUPE_MAX_MESSAGE_ID_BYTES",
        "Longest accepted messageId, in UTF-8 bytes.",
        within=(1, 4096),
    )
    log_level: str = setting("info", "DEDUPE_LOG_LEVEL", "Log level of the worker.")

    def __post_init__(self) -> None:
        if not self.repartition_topic:
            derived = f"{self.app_id}-{self.input_topic}-repartition"
            object.__setattr__(self, "repartition_topic", derived)
        if self.bucket == 0:
            object.__setattr__(self, "bucket", derived_bucket(self.window))
        self.check(self.kafka_security_problems() + cross_checks(self))

    @property
    def web_url(self) -> str:
        """Where other workers reach this one's web server (Faust's canonical URL)."""
        host = self.web_advertised_host or self.web_host
        if host in ("0.0.0.0", "::", ""):
            host = socket.gethostname()
        return f"http://{host}:{self.web_port}"

    @property
    def state_dir(self) -> Path:
        """Where Faust keeps this app's tables (below ``data_dir``)."""
        return self.data_dir / self.app_id
