"""One settings object for the whole worker, read from the environment and validated at start-up.

Every knob is one field with its environment variable, default and meaning. ``Settings.from_env()``
is called by ``create_app`` (never at class-definition time), so tests and tools can build apps
with their own settings. An invalid value stops the process with a message that names the
variable, the value and what is accepted.

Faust reads a few environment variables on its own (``WORKDIR``, ``F_DATADIR``...); we pass every
Faust setting explicitly so those have no effect on the dedup worker.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from app.settings_checks import cross_checks
from envsettings import EnvSettings, SettingsError, parse_duration, setting
from envsettings.kafka_security import KafkaSecuritySettings
from tables.window import derived_bucket

#: Batch compressions the worker can write (aiokafka's codecs; cramjam brings all but gzip).
COMPRESSIONS = ("none", "zstd", "lz4", "snappy", "gzip")

__all__ = ["EnvSettings", "Settings", "SettingsError", "parse_duration", "setting"]


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
        within=(1, 10_000),
    )
    replication_factor: str = setting(
        "auto",
        "DEDUPE_REPLICATION_FACTOR",
        "Replication factor of the topics the worker creates: auto (3 on a cluster of three "
        "or more brokers, else the broker count: 1 on a single node) or 1..32. An existing "
        "topic with replication 1 on a cluster of two or more brokers stops the worker unless "
        "this is set to 1 explicitly (then a warning).",
    )
    min_insync_replicas: str = setting(
        "auto",
        "DEDUPE_MIN_INSYNC_REPLICAS",
        "min.insync.replicas written on the topics the worker creates: auto (2 when their "
        "replication is 3 or more, else 1) or 1..32. With acks=all a write is acknowledged "
        "once this many replicas have it; at 2 any one broker can be lost without losing a "
        "committed transaction.",
    )
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
    commit_interval: float = setting(
        0.1,
        "DEDUPE_COMMIT_INTERVAL",
        "How often each partition's transaction commits (duration, e.g. 100ms). "
        "read_committed readers see output within about this interval.",
        within=(0.001, 60.0),
    )
    commit_timeout: float = setting(
        30.0,
        "DEDUPE_COMMIT_TIMEOUT",
        "How long a commit may take before its outcome counts as unknown; the producer is "
        "then recreated with the same transactional id (never aborted).",
        within=(1.0, 600.0),
    )
    transaction_timeout: float = setting(
        15.0,
        "DEDUPE_TRANSACTION_TIMEOUT",
        "Broker-side transaction timeout: an open transaction of a dead worker is aborted "
        "after this long (or at once when its partition is taken over).",
        within=(1.0, 900.0),
    )
    transaction_protocol: str = setting(
        "auto",
        "DEDUPE_TRANSACTION_PROTOCOL",
        "Kafka transaction protocol of the worker's producers: auto (v2 when the cluster "
        "finalized transaction.version 2, read at start-up, else v1), v1 (the old flow, which "
        "every broker accepts) or v2 (KIP-890: the epoch bumped at every commit; refused on a "
        "cluster that did not finalize it). The start-up log and /stats say which one runs.",
        one_of=("auto", "v1", "v2"),
    )
    compression: str = setting(
        "none",
        "DEDUPE_COMPRESSION",
        "Compression of the batches the worker writes to the clean and dead-letter topics "
        "(Kafka's compression.type): none, zstd, lz4, snappy or gzip. Their records are whole "
        "events, so compressing them costs throughput. Readers need the codec (Kafka's Java "
        "clients and Spark have them all).",
        one_of=COMPRESSIONS,
    )
    changelog_compression: str = setting(
        "zstd",
        "DEDUPE_CHANGELOG_COMPRESSION",
        "Compression of the batches the worker writes to its changelogs: zstd (a record of a "
        "UUID id in about half the bytes on the broker's disk, for a little CPU per event; "
        "bench/results-recovery.md has the bytes per id), lz4, snappy, gzip or none.",
        one_of=COMPRESSIONS,
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
        within=(0.001, 30.0),
    )
    stall_timeout: float = setting(
        20.0,
        "DEDUPE_STALL_TIMEOUT",
        "How long a partition may go without a record reaching the agent while the broker "
        "holds a committed record past its position (and no rebalance or recovery runs) "
        "before the worker seeks it back to that position; if it stays stalled as long "
        "again, the worker rejoins the group. Guards against records Faust's consumer "
        "fetched but never delivered.",
        within=(1.0, 3600.0),
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
    dlq_max_message_bytes: int = setting(
        8 * 1024 * 1024,
        "DEDUPE_DLQ_MAX_MESSAGE_BYTES",
        "max.message.bytes of the dead-letter topic (and the producer's request limit), so "
        "any input record fits there with its original bytes.",
        within=(2**20, 2**31),
    )
    window: float = setting(
        28 * 86400.0,
        "DEDUPE_WINDOW",
        "Dedup window W: a copy is a repeat when its id was first seen less than W before the "
        "copy's record time (W itself is outside). Units s, m, h, d.",
        within=(1.0, 3650 * 86400.0),
    )
    window_from: str = setting(
        "first_seen",
        "DEDUPE_WINDOW_FROM",
        "Where an id's window starts: 'first_seen' (the forwarded copy; a repeat never extends "
        "the id's life, right for client retries) or 'last_seen' (every repeat re-arms it, for "
        "ids that repeat while they are alive: polling sources, webhooks re-sent until "
        "acknowledged). Per source: DEDUPE_SOURCE_WINDOW_FROM.",
        one_of=("first_seen", "last_seen"),
    )
    source_window_from: str = setting(
        "",
        "DEDUPE_SOURCE_WINDOW_FROM",
        "DEDUPE_WINDOW_FROM per source (header dedupe.source, as DEDUPE_SOURCE_POLICIES), over "
        "the default: e.g. 'poller=last_seen,web=first_seen'.",
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
        within=(0.0, 365 * 86400.0),
    )
    max_ids_per_partition: int = setting(
        20_000_000,
        "DEDUPE_MAX_IDS_PER_PARTITION",
        "Size cap per partition: past it the oldest ids are evicted first and the effective "
        "window shrinks.",
        within=(1, 10**12),
    )
    min_window: float = setting(
        86400.0,
        "DEDUPE_MIN_WINDOW",
        "A warning is logged when the size cap makes a partition's effective window shorter "
        "(than this, or than DEDUPE_WINDOW when that is shorter).",
        within=(0.0, 3650 * 86400.0),
    )
    eviction_batch: int = setting(
        64,
        "DEDUPE_EVICTION_BATCH",
        "Most ids aged out per processed record (bounds the work added to any one record).",
        within=(1, 100_000),
    )
    time_source: str = setting(
        "kafka",
        "DEDUPE_TIME_SOURCE",
        "Record time for the window: 'kafka' (the record's Kafka timestamp) or 'event' (the "
        "event's own ISO-8601 'timestamp', falling back to the Kafka one).",
        one_of=("kafka", "event"),
    )
    max_future_skew: float = setting(
        3600.0,
        "DEDUPE_MAX_FUTURE_SKEW",
        "With DEDUPE_TIME_SOURCE=event: event times later than the Kafka timestamp plus this "
        "are clamped to it.",
        within=(0.0, 365 * 86400.0),
    )
    rocksdb_write_buffer_bytes: int = setting(
        64 * 1024 * 1024,
        "DEDUPE_ROCKSDB_WRITE_BUFFER_BYTES",
        "RocksDB memtable size per partition database (column family); smaller flushes sooner.",
        within=(64 * 2**10, 2**31),
    )
    rocksdb_memtable_budget_bytes: int = setting(
        256 * 1024 * 1024,
        "DEDUPE_ROCKSDB_MEMTABLE_BUDGET_BYTES",
        "RocksDB memtables of all partitions together (one write-buffer manager): past it, "
        "memtables are flushed early, so memory does not grow with the partitions held.",
        within=(2**20, 2**36),
    )
    rocksdb_block_cache_bytes: int = setting(
        128 * 1024 * 1024,
        "DEDUPE_ROCKSDB_BLOCK_CACHE_BYTES",
        "RocksDB block cache shared by all partitions (data, index and filter blocks); "
        "about 2 bytes per id held keeps every filter and index partition cached.",
        within=(2**20, 2**36),
    )
    rocksdb_compression: str = setting(
        "zstd",
        "DEDUPE_ROCKSDB_COMPRESSION",
        "Compression of the state's RocksDB blocks: zstd (about 50 bytes per UUID id held, ids "
        "and age-out index), lz4, snappy (RocksDB's default) or none. Applies to files written "
        "from then on; older files keep theirs. (A bulk restore writes level 0 uncompressed; "
        "compaction compresses it.)",
        one_of=("zstd", "lz4", "snappy", "none"),
    )
    rocksdb_block_bytes: int = setting(
        16 * 1024,
        "DEDUPE_ROCKSDB_BLOCK_BYTES",
        "Size of the state's RocksDB data blocks (before compression). Larger blocks compress "
        "better (16 KiB: about 3 bytes per id fewer than RocksDB's 4 KiB) and a lookup of a "
        "held id that misses the block cache reads and decompresses one whole block. Applies "
        "to files written from then on.",
        within=(1024, 1024 * 1024),
    )
    strategy: str = setting(
        "message_id",
        "DEDUPE_STRATEGY",
        "How records are deduplicated when their source has no policy: 'message_id' (the "
        "event's messageId), 'producer_sequence' (headers dedupe.producer and dedupe.sequence) "
        "or 'off' (every copy forwarded). A record with producer headers uses "
        "producer_sequence unless its source's policy says otherwise (docs/strategies.md).",
        one_of=("message_id", "producer_sequence", "off"),
    )
    source_policies: str = setting(
        "",
        "DEDUPE_SOURCE_POLICIES",
        "Strategy per source (header dedupe.source, set by the ingest service from the write "
        "key), over DEDUPE_STRATEGY: e.g. 'web=message_id,billing=producer_sequence,legacy=off'.",
    )
    scope: str = setting(
        "global",
        "DEDUPE_SCOPE",
        "'global': a messageId is one event whatever its source; 'source': the same messageId "
        "from two sources is two events.",
        one_of=("global", "source"),
    )
    missing_id: str = setting(
        "dead_letter",
        "DEDUPE_MISSING_ID",
        "A JSON object without a messageId: 'dead_letter', or 'fingerprint': deduplicated by a "
        "128-bit hash of its canonical form (sorted keys, DEDUPE_FINGERPRINT_EXCLUDE removed), "
        "its output key and header dedupe.fingerprint.",
        one_of=("dead_letter", "fingerprint"),
    )
    fingerprint_exclude: str = setting(
        "sentAt,receivedAt,_metadata",
        "DEDUPE_FINGERPRINT_EXCLUDE",
        "Top-level fields left out of fingerprints and content hashes (they differ between "
        "retries of one event), comma-separated.",
    )
    verify_content: bool = setting(
        False,
        "DEDUPE_VERIFY_CONTENT",
        "Keep an 8-byte content hash per id; a copy inside the window whose content differs "
        "goes to the dead-letter topic (dedupe.error=messageId-reused) instead of being dropped.",
    )
    producer_idle: float = setting(
        6 * 3600.0,
        "DEDUPE_PRODUCER_IDLE",
        "A producer with no record for this long (record time) is forgotten.",
        within=(1.0, 3650 * 86400.0),
    )
    max_producers_per_partition: int = setting(
        10_000,
        "DEDUPE_MAX_PRODUCERS_PER_PARTITION",
        "Producers remembered per partition; past it the least recently active goes first.",
        within=(1, 10_000_000),
    )
    session_timeout: float = setting(
        10.0,
        "DEDUPE_SESSION_TIMEOUT",
        "Consumer group session timeout: how soon a dead worker's partitions move.",
        within=(1.0, 300.0),
    )
    standby_replicas: int = setting(
        0,
        "DEDUPE_STANDBY_REPLICAS",
        "Standby copies of each state partition on other workers, kept warm in bulk "
        "(recovery/follow.py): a takeover then restores only a copy's lag (in /stats).",
        within=(0, 8),
    )
    bulk_restore: bool = setting(
        True,
        "DEDUPE_BULK_RESTORE",
        "Rebuild taken-over state partitions with the bulk restorer (whole write batches, "
        "recovery/restore.py); false: Faust's per-record recovery, some 20x slower (kept as a "
        "fallback and as the recovery benchmark's baseline).",
    )
    snapshot_dir: str = setting(
        "",
        "DEDUPE_SNAPSHOT_DIR",
        "Scheduled snapshots: every DEDUPE_SNAPSHOT_INTERVAL the worker writes a snapshot of "
        "its state (as `python -m app snapshot` does) into a new directory below this one and "
        "keeps the newest DEDUPE_SNAPSHOT_KEEP. Empty: none.",
    )
    snapshot_interval: float = setting(
        3600.0,
        "DEDUPE_SNAPSHOT_INTERVAL",
        "Time between scheduled snapshots (the first one this long after start-up).",
        within=(10.0, 7 * 86400.0),
    )
    snapshot_keep: int = setting(
        3,
        "DEDUPE_SNAPSHOT_KEEP",
        "How many scheduled snapshots to keep (the oldest are deleted after a new one).",
        within=(1, 1000),
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
    def state_dir(self) -> Path:
        """Where Faust keeps this app's tables (below ``data_dir``)."""
        return self.data_dir / self.app_id
