"""``seen_ids``: the ids this worker has forwarded, one RocksDB database per partition.

- Key: the ``messageId`` as UTF-8 bytes (at most ``DEDUPE_MAX_MESSAGE_ID_BYTES``).
- Value: the first-seen time, the Kafka timestamp (ms) of the first copy, 8 bytes big-endian
  (``app.rules.encode_first_seen``). A repeat never rewrites it.
- Partitioning: co-partitioned with the input and repartition topics (same partition count, key
  = messageId, Kafka's default murmur2 partitioner), so every copy of an id meets the same state.
- Changelog: ``<app id>-seen_ids-changelog``, compacted, written inside each partition's
  transaction (``tables.transactional``).
- Retention: ids are held until age-out removes them. Age-out by time window and size cap is
  not part of this version yet: the table grows with the number of distinct ids (about 60-80
  bytes per id on disk after compaction, plus the compacted changelog). Trade-off: no id is
  ever forgotten, so no late repeat slips through, at the cost of unbounded state.
"""

from __future__ import annotations

import faust

from app.settings import Settings
from tables.transactional import TransactionalTable

TABLE_NAME = "seen_ids"


def changelog_topic_name(settings: Settings) -> str:
    """Faust's name for the table's changelog topic."""
    return f"{settings.app_id}-{TABLE_NAME}-changelog"


def declare_seen_ids(app: faust.App, settings: Settings) -> TransactionalTable:
    """Declare the table on ``app`` (one per app)."""
    table = TransactionalTable(
        app,
        name=TABLE_NAME,
        partitions=settings.partitions,
        beacon=app.tables.beacon,
        help="messageId -> first-seen Kafka timestamp (ms) of the one forwarded copy",
    )
    app.tables.add(table)
    return table
