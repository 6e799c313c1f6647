"""One settings object for the whole worker, read from the environment and validated at start-up.

Every knob is one field with its environment variable, default and meaning. ``Settings.from_env()``
is called by ``create_app`` (never at class-definition time), so tests and tools can build apps
with their own settings. An invalid value stops the process with a message that names the
variable, the value and what is accepted.

Faust reads a few environment variables on its own (``WORKDIR``, ``F_DATADIR``...); we pass every
Faust setting explicitly so those have no effect on the dedup worker.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from app import faults
from envsettings import EnvSettings, SettingsError, parse_duration, setting
from envsettings.kafka_security import KafkaSecuritySettings

__all__ = ["EnvSettings", "Settings", "SettingsError", "parse_duration", "setting"]


#: Values of ``DEDUPE_PROCESSING_GUARANTEE``.
EXACTLY_ONCE = "exactly_once"
AT_LEAST_ONCE = "at_least_once"

#: Without ``DEDUPE_BUCKET``, the age-out bucket is the window divided by this, at most
#: :data:`MAX_DERIVED_BUCKET`: ids then outlive the window by at most 1% (and an hour).
BUCKET_DIVISOR = 100
MAX_DERIVED_BUCKET = 3600.0


def derived_bucket(window: float) -> float:
    """The age-out bucket when ``DEDUPE_BUCKET`` is not set: ``min(1h, window / 100)``.

    An id leaves at most one bucket after it could (the index is walked bucket by bucket), so
    a bucket this size keeps ids at most 1% (and at most an hour) past the window. Any window
    from 1s up gives a bucket of at least 10ms; the default 28-day window keeps the 1h bucket.
    """
    return min(MAX_DERIVED_BUCKET, window / BUCKET_DIVISOR)


@dataclass(frozen=True)
class Settings(KafkaSecuritySettings):
    """Every setting of the dedup worker. Build with :meth:`from_env`; validated on creation."""

    bootstrap_servers: str = setting(
        "localhost:9092", "KAFKA_BOOTSTRAP_SERVERS", "Kafka brokers, comma-separated host:port."
    )
    app_id: str = setting(
        "dedupe",
        "DEDUPE_APP_ID",
        "Faust app id: the consumer group, the prefix of transactional ids and of the "
        "changelog topic. Changing it starts from scratch (new group, new state). One per "
        "pipeline: a worker refuses to start when the group has committed offsets for a topic "
        "it does not read (another input topic).",
    )
    input_topic: str = setting(
        "events", "DEDUPE_INPUT_TOPIC", "Topic of raw events, keyed by messageId."
    )
    output_topic: str = setting(
        "events-clean",
        "DEDUPE_OUTPUT_TOPIC",
        "Clean topic: each messageId once, written transactionally.",
    )
    dlq_topic: str = setting(
        "events-dlq", "DEDUPE_DLQ_TOPIC", "Dead-letter topic: bad input with its reason in headers."
    )
    repartition_topic: str = setting(
        "",
        "DEDUPE_REPARTITION_TOPIC",
        "Topic that re-keys records whose key is not their messageId. "
        "Default: '<app id>-<input topic>-repartition'.",
    )
    partitions: int = setting(
        8,
        "DEDUPE_PARTITIONS",
        "Partition count of input, repartition, changelog, output and dead-letter topics. "
        "Existing topics must agree or the worker refuses to start.",
    )
    replication_factor: int = setting(
        1, "DEDUPE_REPLICATION_FACTOR", "Replication factor for topics the worker creates."
    )
    data_dir: Path = setting(
        Path("./data"),
        "DEDUPE_DATA_DIR",
        "Local state (RocksDB per partition). Safe to wipe: rebuilt from the changelog.",
    )
    web_host: str = setting(
        "127.0.0.1", "DEDUPE_WEB_HOST", "Address the worker's web server binds to."
    )
    web_port: int = setting(6066, "DEDUPE_WEB_PORT", "Port of the worker's web server.")
    processing_guarantee: str = setting(
        EXACTLY_ONCE,
        "DEDUPE_PROCESSING_GUARANTEE",
        "'exactly_once': one Kafka transaction per partition covers each record's output, "
        "changelog record and offset (everything docs/design.md promises). 'at_least_once' (for "
        "benchmarks and comparisons, see app/alo.py): a plain producer, offsets committed every "
        "DEDUPE_COMMIT_INTERVAL after the sends are acknowledged; after a crash the records "
        "since the last commit are processed again and a first copy may be forwarded twice.",
    )
    commit_interval: float = setting(
        0.1,
        "DEDUPE_COMMIT_INTERVAL",
        "How often each partition's transaction commits (duration, e.g. 100ms). "
        "read_committed readers see output within about this interval.",
    )
    commit_timeout: float = setting(
        30.0,
        "DEDUPE_COMMIT_TIMEOUT",
        "How long a commit may take before its outcome counts as unknown; the producer is "
        "then recreated with the same transactional id (never aborted).",
    )
    transaction_timeout: float = setting(
        15.0,
        "DEDUPE_TRANSACTION_TIMEOUT",
        "Broker-side transaction timeout: an open transaction of a dead worker is aborted "
        "after this long (or at once when its partition is taken over).",
    )
    fetch_max_wait: float = setting(
        0.1,
        "DEDUPE_FETCH_MAX_WAIT",
        "How long the broker may hold the worker's fetch request for data that has not "
        "arrived (Kafka's fetch.max.wait.ms; Faust fixes it at 1.5s). The consumer sends one "
        "fetch at a time to a broker: a fetch for partitions with nothing new (the repartition "
        "topic, mostly) keeps the input partitions waiting as long, so this bounds how long "
        "records already on the broker wait to be read. Lower reads sooner; higher sends "
        "fewer empty fetches to an idle broker.",
    )
    stall_timeout: float = setting(
        20.0,
        "DEDUPE_STALL_TIMEOUT",
        "How long a partition may go without a record reaching the agent while the broker "
        "holds a committed record past its position (and no rebalance or recovery runs) "
        "before the worker seeks it back to that position; if it stays stalled as long "
        "again, the worker rejoins the group. Guards against records Faust's consumer "
        "fetched but never delivered.",
    )
    max_event_bytes: int = setting(
        32 * 1024,
        "DEDUPE_MAX_EVENT_BYTES",
        "Largest accepted event value in bytes (Segment's limit is 32 KB); larger values "
        "are dead-lettered.",
    )
    max_message_id_bytes: int = setting(
        256, "DEDUPE_MAX_MESSAGE_ID_BYTES", "Longest accepted messageId, in UTF-8 bytes."
    )
    dlq_max_message_bytes: int = setting(
        8 * 1024 * 1024,
        "DEDUPE_DLQ_MAX_MESSAGE_BYTES",
        "max.message.bytes of the dead-letter topic (and the producer's request limit), so "
        "any input record fits there with its original bytes.",
    )
    window: float = setting(
        28 * 86400.0,
        "DEDUPE_WINDOW",
        "Dedup window W: a copy is a repeat when its id was first seen less than W before the "
        "copy's record time (W itself is outside). Units s, m, h, d.",
    )
    bucket: float = setting(
        0.0,
        "DEDUPE_BUCKET",
        "Time bucket of the age-out index: ids leave at most one bucket after they could. "
        "Unset or 0: DEDUPE_WINDOW / 100, at most 1h (a 28-day window gets 1h, a 60s window "
        "600ms). Set explicitly, it must be 1ms..DEDUPE_WINDOW.",
    )
    allowed_lateness: float = setting(
        3600.0,
        "DEDUPE_ALLOWED_LATENESS",
        "Ids are kept this long past the window, so records up to this far behind the "
        "partition's newest first sighting are still judged against every id they should be.",
    )
    max_ids_per_partition: int = setting(
        20_000_000,
        "DEDUPE_MAX_IDS_PER_PARTITION",
        "Size cap per partition: past it the oldest ids are evicted first and the effective "
        "window shrinks.",
    )
    min_window: float = setting(
        86400.0,
        "DEDUPE_MIN_WINDOW",
        "A warning is logged when the size cap makes a partition's effective window shorter "
        "(than this, or than DEDUPE_WINDOW when that is shorter).",
    )
    eviction_batch: int = setting(
        64,
        "DEDUPE_EVICTION_BATCH",
        "Most ids aged out per processed record (bounds the work added to any one record).",
    )
    time_source: str = setting(
        "kafka",
        "DEDUPE_TIME_SOURCE",
        "Record time for the window: 'kafka' (the record's Kafka timestamp) or 'event' (the "
        "event's own ISO-8601 'timestamp', falling back to the Kafka one).",
    )
    max_future_skew: float = setting(
        3600.0,
        "DEDUPE_MAX_FUTURE_SKEW",
        "With DEDUPE_TIME_SOURCE=event: event times later than the Kafka timestamp plus this "
        "are clamped to it.",
    )
    rocksdb_write_buffer_bytes: int = setting(
        64 * 1024 * 1024,
        "DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES",
        "RocksDB memtable size per partition database (column family); smaller flushes sooner.",
    )
    rocksdb_memtable_budget_bytes: int = setting(
        256 * 1024 * 1024,
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES",
        "RocksDB memtables of all partitions together (one write-buffer manager): past it, "
        "memtables are flushed early, so memory does not grow with the partitions held.",
    )
    rocksdb_block_cache_bytes: int = setting(
        128 * 1024 * 1024,
        "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES",
        "RocksDB block cache shared by all partitions (data, index and filter blocks); "
        "about 2 bytes per id held keeps every filter and index partition cached.",
    )
    session_timeout: float = setting(
        10.0,
        "DEDUPE_SESSION_TIMEOUT",
        "Consumer group session timeout: how soon a dead worker's partitions move.",
    )
    standby_replicas: int = setting(
        0, "DEDUPE_STANDBY_REPLICAS", "Standby copies of each state partition on other workers."
    )
    fault_injection: str = setting(
        "",
        "DEDUPE_FAULT_INJECTION",
        "Fault tests only: '<point>=<action>@<n>' (see app/faults.py). Empty in production.",
    )
    log_level: str = setting("info", "DEDUPE_LOG_LEVEL", "Log level of the worker.")

    def __post_init__(self) -> None:
        if not self.repartition_topic:
            derived = f"{self.app_id}-{self.input_topic}-repartition"
            object.__setattr__(self, "repartition_topic", derived)
        if self.bucket == 0:
            object.__setattr__(self, "bucket", derived_bucket(self.window))
        problems = list(self._problems())
        if problems:
            raise SettingsError("invalid settings:\n  " + "\n  ".join(problems))

    def _problems(self) -> list[str]:
        out = self.kafka_security_problems()

        def env(name: str) -> str:
            return self.describe(name).env

        if not self.bootstrap_servers.strip():
            out.append(f"{env('bootstrap_servers')} must name at least one broker")
        topic_re = re.compile(r"^[A-Za-z0-9._-]{1,200}$")
        topics = ("app_id", "input_topic", "output_topic", "dlq_topic", "repartition_topic")
        for name in topics:
            value = getattr(self, name)
            if not topic_re.match(value):
                out.append(f"{env(name)}={value!r}: use 1-200 of [A-Za-z0-9._-]")
        names = {n: getattr(self, n) for n in topics[1:]}
        if len(set(names.values())) != len(names):
            listed = ", ".join(f"{env(n)}={v!r}" for n, v in names.items())
            out.append(f"input, output, dead-letter and repartition topics must differ: {listed}")
        if not 1 <= self.partitions <= 10_000:
            out.append(f"{env('partitions')}={self.partitions}: must be 1..10000")
        if not 1 <= self.replication_factor <= 32:
            out.append(f"{env('replication_factor')}={self.replication_factor}: must be 1..32")
        if not 0 < self.web_port < 65536:
            out.append(f"{env('web_port')}={self.web_port}: must be a TCP port")
        if not 0.001 <= self.commit_interval <= 60:
            out.append(f"{env('commit_interval')}={self.commit_interval}s: must be 1ms..60s")
        if not 1 <= self.commit_timeout <= 600:
            out.append(f"{env('commit_timeout')}={self.commit_timeout}s: must be 1s..600s")
        if not 1 <= self.transaction_timeout <= 900:
            out.append(
                f"{env('transaction_timeout')}={self.transaction_timeout}: "
                "must be 1s..900s (broker maximum)"
            )
        if not 0.001 <= self.fetch_max_wait <= 30:
            out.append(f"{env('fetch_max_wait')}={self.fetch_max_wait}s: must be 1ms..30s")
        if not 1 <= self.stall_timeout <= 3600:
            out.append(f"{env('stall_timeout')}={self.stall_timeout}s: must be 1s..3600s")
        if not 64 <= self.max_event_bytes <= 16 * 1024 * 1024:
            out.append(f"{env('max_event_bytes')}={self.max_event_bytes}: must be 64..16MiB")
        if not 1 <= self.max_message_id_bytes <= 4096:
            out.append(
                f"{env('max_message_id_bytes')}={self.max_message_id_bytes}: must be 1..4096"
            )
        if self.dlq_max_message_bytes < 1024 * 1024:
            out.append(
                f"{env('dlq_max_message_bytes')}={self.dlq_max_message_bytes}: "
                "must be at least 1 MiB"
            )
        if not 1 <= self.session_timeout <= 300:
            out.append(f"{env('session_timeout')}={self.session_timeout}: must be 1s..300s")
        if not 0 <= self.standby_replicas <= 8:
            out.append(f"{env('standby_replicas')}={self.standby_replicas}: must be 0..8")
        if not 1 <= self.window <= 3650 * 86400:
            out.append(f"{env('window')}={self.window}s: must be 1s..3650d")
        elif not 0.001 <= self.bucket <= self.window:
            out.append(f"{env('bucket')}={self.bucket}s: must be 1ms..DEDUPE_WINDOW")
        if not 0 <= self.allowed_lateness <= 365 * 86400:
            out.append(f"{env('allowed_lateness')}={self.allowed_lateness}s: must be 0..365d")
        if not 1 <= self.max_ids_per_partition <= 10**12:
            out.append(f"{env('max_ids_per_partition')}={self.max_ids_per_partition}: 1..10^12")
        if not 0 <= self.min_window <= 3650 * 86400:
            out.append(f"{env('min_window')}={self.min_window}s: must be 0..3650d")
        if not 1 <= self.eviction_batch <= 100_000:
            out.append(f"{env('eviction_batch')}={self.eviction_batch}: must be 1..100000")
        if not 64 * 1024 <= self.rocksdb_write_buffer_bytes <= 2**31:
            out.append(f"{env('rocksdb_write_buffer_bytes')}: must be 64KiB..2GiB")
        if not 1024 * 1024 <= self.rocksdb_memtable_budget_bytes <= 2**36:
            out.append(f"{env('rocksdb_memtable_budget_bytes')}: must be 1MiB..64GiB")
        if not 1024 * 1024 <= self.rocksdb_block_cache_bytes <= 2**36:
            out.append(f"{env('rocksdb_block_cache_bytes')}: must be 1MiB..64GiB")
        if self.processing_guarantee not in {EXACTLY_ONCE, AT_LEAST_ONCE}:
            out.append(
                f"{env('processing_guarantee')}={self.processing_guarantee!r}: "
                f"use {EXACTLY_ONCE!r} or {AT_LEAST_ONCE!r}"
            )
        if self.time_source not in {"kafka", "event"}:
            out.append(f"{env('time_source')}={self.time_source!r}: use 'kafka' or 'event'")
        if not 0 <= self.max_future_skew <= 365 * 86400:
            out.append(f"{env('max_future_skew')}={self.max_future_skew}s: must be 0..365d")
        try:
            faults.parse(self.fault_injection)
        except ValueError as exc:
            out.append(f"{env('fault_injection')}: {exc}")
        if self.log_level.lower() not in {"debug", "info", "warning", "error", "critical"}:
            out.append(f"{env('log_level')}={self.log_level!r}: debug|info|warning|error|critical")
        return out

    @property
    def state_dir(self) -> Path:
        """Where Faust keeps this app's tables (below ``data_dir``)."""
        return self.data_dir / self.app_id
