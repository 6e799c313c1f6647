"""One settings object for the Spark jobs, read from the environment and validated at start-up.

Same style as the worker's ``app.settings``: every knob is one field with its environment
variable, default and meaning; ``SparkSettings.from_env()`` is called by the entry points (never
at import time); an invalid value stops the job with a message naming the variable, the value and
what is accepted. ``KAFKA_BOOTSTRAP_SERVERS`` and ``DEDUPE_OUTPUT_TOPIC`` are the worker's own
variables, so the worker and the job agree on the clean topic by construction.

PySpark itself reads ``SPARK_HOME``, ``SPARK_CONF_DIR``, ``PYSPARK_PYTHON`` and
``PYSPARK_SUBMIT_ARGS``; leave them unset when running ``python -m spark.job`` (a ``SPARK_HOME`` of
another Spark release would not match the connector jars; the job checks and refuses to start).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from envsettings import setting
from envsettings.kafka_security import KafkaSecuritySettings
from spark.transforms import EVENT_COLUMNS

#: The repository root; the default jar cache lives below it (``make spark-jars`` fills it).
ROOT = Path(__file__).resolve().parent.parent


class SparkSettingsError(ValueError):
    """A setting of the Spark jobs is missing or invalid."""


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_MEMORY = re.compile(r"^\d+[kmgt]?$", re.IGNORECASE)
#: Values of ``DEDUPE_LAKE_FORMAT`` and ``DEDUPE_LAKE_WRITE``.
DELTA, PARQUET = "delta", "parquet"
APPEND, MERGE = "append", "merge"
#: Columns of the events table that Z-ordering may use (all but the partition column).
ZORDER_COLUMNS = tuple(c for c in EVENT_COLUMNS if c != "event_date")
#: The shortest vacuum retention accepted: files younger than this are never deleted.
MIN_VACUUM_RETENTION = 3600.0

_MASTER = re.compile(r"^(local(\[(\d+|\*)(,\d+)?\])?|(spark|yarn|k8s|mesos)(://.+)?)$")


@dataclass(frozen=True)
class SparkSettings(KafkaSecuritySettings):
    """Every setting of the lake job and the audit. Build with :meth:`from_env`."""

    error = SparkSettingsError

    bootstrap_servers: str = setting(
        "localhost:9092", "KAFKA_BOOTSTRAP_SERVERS", "Kafka brokers, comma-separated host:port."
    )
    topic: str = setting(
        "events-clean",
        "DEDUPE_OUTPUT_TOPIC",
        "The worker's clean topic, which the job reads with read_committed.",
    )
    lake_dir: str = setting(
        "./lake",
        "DEDUPE_LAKE_DIR",
        "Root of the lake: tables events/ and event_counts/. A local path, or any "
        "Hadoop URI (hdfs://, s3a://...) shared by the cluster.",
    )
    lake_format: str = setting(
        "delta",
        "DEDUPE_LAKE_FORMAT",
        "delta: Delta Lake tables, which any Delta reader (Spark, delta-rs/Python, DuckDB, "
        "Trino) sees exactly once through their commit log. parquet: Spark's file sink, "
        "exactly once only for readers that go through its _spark_metadata log (Spark); for "
        "lakes written before Delta. Fixed by the tables: the job refuses the other format.",
    )
    lake_write: str = setting(
        "append",
        "DEDUPE_LAKE_WRITE",
        "How the events query writes (Delta only). append: each micro-batch is appended "
        "(Delta's streaming sink, idempotent per batch). merge: a Delta MERGE on messageId "
        "inserts only ids not in the table yet, so a late duplicate the worker's window let "
        "through is dropped too; it reads the table's ids on every batch (slower; see "
        "bench/results-lake.md).",
    )
    optimize_zorder_by: str = setting(
        "",
        "DEDUPE_LAKE_ZORDER_BY",
        "make lake-optimize: also Z-order the events table's files by these comma-separated "
        "columns (e.g. userId), so queries filtering on them skip files; empty = compaction "
        "only. Not event_date (the partition column).",
    )
    vacuum_retention: float = setting(
        7 * 86400.0,
        "DEDUPE_LAKE_VACUUM_RETENTION",
        "make lake-vacuum deletes files the tables no longer use (compacted away, or left by "
        "interrupted batches) once they are this old. It must outlast the longest micro-batch "
        "and the longest read of an old version; at least 1h (Delta's own default is 7d).",
    )
    checkpoint_dir: str = setting(
        "",
        "DEDUPE_SPARK_CHECKPOINT_DIR",
        "Checkpoints of the two queries (Kafka offsets, watermark, aggregation state). "
        "They belong to the tables: keep, move or delete them together (the job refuses "
        "to start on a table without its checkpoint, and the reverse).",
    )
    metrics_host: str = setting(
        "127.0.0.1",
        "DEDUPE_SPARK_METRICS_HOST",
        "Address the job's Prometheus metrics (GET /metrics, docs/metrics.md) bind to "
        "(0.0.0.0 for every interface).",
    )
    metrics_port: int = setting(
        6067,
        "DEDUPE_SPARK_METRICS_PORT",
        "Port of the job's Prometheus metrics: rows read, batches, batch duration, offsets "
        "of the clean topic not read yet, per query; 0 = not served.",
        within=(0, 65535),
    )
    master: str = setting(
        "local[2]",
        "DEDUPE_SPARK_MASTER",
        "Spark master for `python -m spark.job` (local[2]: two local cores). "
        "Under spark-submit, its --master is used instead.",
    )
    trigger_interval: float = setting(
        10.0,
        "DEDUPE_SPARK_TRIGGER_INTERVAL",
        "How often a micro-batch starts (duration; 0 = as soon as the previous one ends). "
        "Each batch writes new Parquet files, so shorter means fresher and smaller files "
        "(make lake-optimize compacts them).",
    )
    max_offsets_per_trigger: int = setting(
        100_000,
        "DEDUPE_SPARK_MAX_OFFSETS_PER_TRIGGER",
        "Most Kafka offsets one micro-batch reads, so a backlog is read in steps (0 = no limit).",
    )
    starting_offsets: str = setting(
        "earliest",
        "DEDUPE_SPARK_STARTING_OFFSETS",
        "Where a query with a new checkpoint starts: earliest (the whole topic) or latest. "
        "A restarted query always continues from its checkpoint.",
    )
    watermark: float = setting(
        600.0,
        "DEDUPE_SPARK_WATERMARK",
        "How late (event time behind the newest event seen) an event may be and still be "
        "counted in its minute; a minute's count is written once the watermark passes it.",
    )
    shuffle_partitions: int = setting(
        4,
        "DEDUPE_SPARK_SHUFFLE_PARTITIONS",
        "spark.sql.shuffle.partitions: state partitions of the per-minute counts. Fixed by "
        "the checkpoint at the first start.",
    )
    driver_memory: str = setting(
        "1g",
        "DEDUPE_SPARK_DRIVER_MEMORY",
        "spark.driver.memory for `python -m spark.job` (under spark-submit: --driver-memory).",
    )
    jars_dir: Path = setting(
        ROOT / ".cache" / "spark-jars",
        "DEDUPE_SPARK_JARS_DIR",
        "Cache of the Kafka connector and Delta Lake jars, filled by `make spark-jars` "
        "(Maven Central); the jobs load them from here and download nothing.",
    )
    log_level: str = setting(
        "warn", "DEDUPE_SPARK_LOG_LEVEL", "Log level of Spark's JVM (error, warn, info, debug)."
    )

    def __post_init__(self) -> None:
        self.check(self._problems())

    def _problems(self) -> list[str]:
        out = self.kafka_security_problems()

        env = self.env_of
        servers = [s.strip() for s in self.bootstrap_servers.split(",")]
        if not all(re.fullmatch(r"[^\s:/]+:\d{1,5}", s) for s in servers):
            out.append(
                f"{env('bootstrap_servers')}={self.bootstrap_servers!r}: "
                "use comma-separated host:port"
            )
        if not re.fullmatch(r"[A-Za-z0-9._-]{1,200}", self.topic):
            out.append(f"{env('topic')}={self.topic!r}: use 1-200 of [A-Za-z0-9._-]")
        if not self.lake_dir.strip():
            out.append(f"{env('lake_dir')} must not be empty")
        if self.lake_format not in (DELTA, PARQUET):
            out.append(f"{env('lake_format')}={self.lake_format!r}: {DELTA}|{PARQUET}")
        if self.lake_write not in (APPEND, MERGE):
            out.append(f"{env('lake_write')}={self.lake_write!r}: {APPEND}|{MERGE}")
        elif self.lake_write == MERGE and self.lake_format != DELTA:
            out.append(f"{env('lake_write')}={MERGE} needs {env('lake_format')}={DELTA}")
        for column in self.zorder_columns:
            if column not in ZORDER_COLUMNS:
                out.append(
                    f"{env('optimize_zorder_by')}={self.optimize_zorder_by!r}: {column!r} is "
                    "not a column of the events table (nor event_date, its partition column)"
                )
        if not MIN_VACUUM_RETENTION <= self.vacuum_retention <= 3650 * 86400:
            out.append(
                f"{env('vacuum_retention')}={self.vacuum_retention:g}s: must be 1h..10y "
                "(a shorter one could delete files of a batch being written)"
            )
        if not _MASTER.match(self.master):
            out.append(
                f"{env('master')}={self.master!r}: use local[N], local[*], spark://host:port, "
                "yarn or k8s://..."
            )
        if not 0 <= self.trigger_interval <= 3600:
            out.append(f"{env('trigger_interval')}={self.trigger_interval:g}s: must be 0..1h")
        if not 0 <= self.max_offsets_per_trigger <= 1_000_000_000:
            out.append(
                f"{env('max_offsets_per_trigger')}={self.max_offsets_per_trigger}: "
                "must be 0 (no limit) or a positive count"
            )
        if self.starting_offsets not in ("earliest", "latest"):
            out.append(f"{env('starting_offsets')}={self.starting_offsets!r}: earliest|latest")
        if not 1 <= self.watermark <= 7 * 86400:
            out.append(f"{env('watermark')}={self.watermark:g}s: must be 1s..7d")
        if not 1 <= self.shuffle_partitions <= 10_000:
            out.append(f"{env('shuffle_partitions')}={self.shuffle_partitions}: must be 1..10000")
        if not _MEMORY.match(self.driver_memory):
            out.append(f"{env('driver_memory')}={self.driver_memory!r}: use e.g. 512m, 1g, 4g")
        if self.log_level.lower() not in {"error", "warn", "info", "debug"}:
            out.append(f"{env('log_level')}={self.log_level!r}: error|warn|info|debug")
        return out

    @property
    def zorder_columns(self) -> list[str]:
        return [c.strip() for c in self.optimize_zorder_by.split(",") if c.strip()]

    # Derived locations ----------------------------------------------------------------------

    @property
    def lake_root(self) -> str:
        """The lake root: a URI as given, a local path made absolute (logs show where data is)."""
        return _absolute(self.lake_dir)

    @property
    def checkpoint_root(self) -> str:
        if self.checkpoint_dir:
            return _absolute(self.checkpoint_dir)
        return _join(self.lake_root, "_checkpoints")

    @property
    def events_path(self) -> str:
        """The events table: one row per messageId, partitioned by event_date."""
        return _join(self.lake_root, "events")

    @property
    def counts_path(self) -> str:
        """The per-minute counts table, partitioned by event_date."""
        return _join(self.lake_root, "event_counts")

    @property
    def events_checkpoint(self) -> str:
        return _join(self.checkpoint_root, "events")

    @property
    def counts_checkpoint(self) -> str:
        return _join(self.checkpoint_root, "event_counts")

    @property
    def trigger(self) -> str:
        """The processing-time trigger as Spark spells it."""
        return f"{round(self.trigger_interval * 1000)} milliseconds"

    @property
    def watermark_delay(self) -> str:
        return f"{round(self.watermark * 1000)} milliseconds"


def _absolute(path: str) -> str:
    if _URI.match(path):
        return path.rstrip("/")
    return os.path.abspath(path)


def _join(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"
