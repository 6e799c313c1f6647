"""Benchmark contender: the same de-duplication on Quix Streams, exactly-once, RocksDB state.

    python -m bench.contenders.quix_dedup --bootstrap B --input T --output T2 \\
        --partitions P --state-dir D --group G

A stateful Quix Streams ``Application`` (``processing_guarantee="exactly-once"``,
``auto_offset_reset="earliest"``, ``consumer_group=G``, ``state_dir=D``) reads the input topic,
keeps one RocksDB entry per record key (Quix prefixes a stateful callback's state with the
message key, which is the messageId) and forwards the first copy of each key with
``sdf.to_topic``: key, value bytes, headers and timestamp unchanged (``bytes`` serializers, so
nothing is parsed or re-encoded). Runs in the foreground; SIGTERM or SIGINT stops it cleanly
(Quix installs the handlers: it commits what it processed and exits 0).

What it is, and is not, compared with the dedupe worker:

- **Exactly-once** is Quix's own: one transactional producer for the application, and each
  checkpoint (every ``commit_interval``) commits the output records, the changelog records of
  the state and the input offsets in one Kafka transaction. Output is visible to
  ``read_committed`` readers when that transaction commits, so end-to-end latency is at least
  the commit interval: ``BENCH_QUIX_COMMIT_INTERVAL`` seconds, default 0.1, the same as the
  worker's ``DEDUPE_COMMIT_INTERVAL`` (Quix's own default is 5 s, which trades latency for
  throughput).
- **Ids are kept forever.** ``state.set`` is called without a ``ttl``, so the store (and its
  changelog topic ``changelog__<group>--<input>--default``, which Quix creates itself) grows
  with every distinct id; there is no time window and no size cap like the worker's age-out.
  The comparison is on de-duplication throughput, not on bounded state.
- **The dedup key is the record key**, as the benchmark's input is keyed by messageId with
  Kafka's default (murmur2) partitioner; the output is produced with murmur2 as well, so a key
  lands in the same partition number as the worker would put it. The value is not parsed. A
  record without a key cannot be deduplicated by key and is forwarded unchanged (the worker
  would re-key it through a repartition topic; this contender has no such step).
- Topics: the input topic and the output topic are created with ``--partitions`` partitions
  (replication 1) when they do not exist.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from quixstreams import Application, State
from quixstreams.models.topics import TopicConfig

PREFIX = "quix-dedup:"
#: Seconds between Quix checkpoints (each one commits a Kafka transaction).
COMMIT_INTERVAL_ENV = "BENCH_QUIX_COMMIT_INTERVAL"
DEFAULT_COMMIT_INTERVAL = 0.1
#: The state key under each messageId prefix: "seen" (value 1). Kept tiny on purpose.
SEEN = "s"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers")
    parser.add_argument("--input", required=True, help="input topic (key = messageId)")
    parser.add_argument("--output", required=True, help="output topic (first copies)")
    parser.add_argument("--partitions", type=int, required=True, help="partitions of the topics")
    parser.add_argument("--state-dir", required=True, help="directory of the RocksDB state")
    parser.add_argument("--group", required=True, help="consumer group (and transactional id)")
    return parser.parse_args(argv)


def first_copy(value: Any, key: Any, timestamp: int, headers: Any, state: State[str, int]) -> bool:
    """True for the first record of its key (remembered from then on), False for a repeat."""
    del value, timestamp, headers
    if key is None:
        return True  # not deduplicable by key: forwarded as is (see the module docstring)
    if state.get(SEEN) is not None:
        return False
    state.set(SEEN, 1)
    return True


def build_app(args: argparse.Namespace, commit_interval: float) -> Application:
    """The application with its dataframe: input -> stateful filter -> output."""
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=commit_interval,
        state_dir=args.state_dir,
        loglevel="INFO",
    )
    config = TopicConfig(num_partitions=args.partitions, replication_factor=1)
    bytes_serde: dict[str, Any] = {
        "key_deserializer": "bytes",
        "value_deserializer": "bytes",
        "key_serializer": "bytes",
        "value_serializer": "bytes",
    }
    input_topic = app.topic(args.input, config=config, **bytes_serde)
    output_topic = app.topic(args.output, config=config, **bytes_serde)
    sdf = app.dataframe(input_topic)
    sdf = sdf.filter(first_copy, stateful=True, metadata=True)
    sdf.to_topic(output_topic)
    return app


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    commit_interval = float(os.environ.get(COMMIT_INTERVAL_ENV, DEFAULT_COMMIT_INTERVAL))
    os.makedirs(args.state_dir, exist_ok=True)
    app = build_app(args, commit_interval)
    print(
        f"{PREFIX} {args.input} -> {args.output} at {args.bootstrap}, group {args.group}, "
        f"exactly-once, commit every {commit_interval:g}s, state in {args.state_dir}",
        flush=True,
    )
    # Quix installs its own SIGTERM/SIGINT handlers in run(): they stop the processing loop,
    # which commits the last checkpoint and closes the consumer, producer and stores.
    app.run(collect=False)
    print(f"{PREFIX} stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
