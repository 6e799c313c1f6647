"""The Kafka section of the worker's settings: brokers, group, topics, transactions, fetches.

A base class of :class:`app.settings.Settings`, which validates it with every other section.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from envsettings import setting
from envsettings.kafka_security import KafkaSecuritySettings

#: Batch compressions the worker can write (aiokafka's codecs; cramjam brings all but gzip).
COMPRESSIONS = ("none", "zstd", "lz4", "snappy", "gzip")


@dataclass(frozen=True)
class KafkaSettings(KafkaSecuritySettings):
    """Kafka settings of the dedup worker (a section of :class:`app.settings.Settings`)."""

    SECTION: ClassVar[str] = "Kafka"

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
        "Existing topics must agree or the worker refuses to start; `python -m app grow` raises "
        "it to a multiple with the ids held kept (docs/operations.md).",
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
    commit_interval: float = setting(
        0.1,
        "DEDUPE_COMMIT_INTERVAL",
        "How often each partition's transaction commits (duration, e.g. 100ms): from one "
        "commit's start to the next while the worker keeps up with its input, from a "
        "commit's end while it is behind. read_committed readers see output within about "
        "this interval plus a commit.",
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
    native_records: str = setting(
        "auto",
        "DEDUPE_NATIVE_RECORDS",
        "How the input and repartition partitions' fetched record batches are decoded: "
        "native (the dedupe_native extension ``make install`` builds from native/: one call per "
        "fetched partition, the same records as aiokafka's own loop, which still handles any "
        "batch it cannot; and, with DEDUPE_TIME_SOURCE=kafka and no DEDUPE_VERIFY_CONTENT, "
        "each batch's messageIds found by one scan of the values instead of a JSON parse per "
        "record, which still runs for any value the scan is not certain of; and the batches "
        "the worker writes, uncompressed or zstd, built natively, the same records aiokafka's "
        "builder writes) or aiokafka (its Python loop, a record object built per record, every "
        "value parsed, every batch built by its builder). "
        "auto: native when the extension is installed, else aiokafka; on: native, and the "
        "worker does not start without the extension; off: aiokafka.",
        one_of=("auto", "on", "off"),
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
    dlq_max_message_bytes: int = setting(
        8 * 1024 * 1024,
        "DEDUPE_DLQ_MAX_MESSAGE_BYTES",
        "max.message.bytes of the dead-letter topic (and the producer's request limit), so "
        "any input record fits there with its original bytes.",
        within=(2**20, 2**31),
    )
    session_timeout: float = setting(
        10.0,
        "DEDUPE_SESSION_TIMEOUT",
        "Consumer group session timeout: how soon a dead worker's partitions move.",
        within=(1.0, 300.0),
    )
