"""Merge-on-id mode of the events query (``DEDUPE_LAKE_WRITE=merge``): unique beyond the window.

The worker forgets an id after ``DEDUPE_WINDOW``; a copy arriving later passes as new and the
lake, appending, holds that id twice (``make audit`` shows it). In this mode every micro-batch
goes through ``foreachBatch`` into one Delta ``MERGE``::

    MERGE INTO events t USING batch s ON t.messageId = s.messageId
    WHEN NOT MATCHED THEN INSERT *

so an id already in the table is never inserted again, whatever its age. The batch is first made
unique on messageId (two copies inside one batch match nothing in the table and would both be
inserted). The cost: every batch joins its ids against the table's whole messageId column (the
Parquet column alone, but all of it), so a batch costs more as the table grows; bench/lake.py
measures it against the append.

Exactly once across kill -9: Spark re-runs an interrupted batch with the same offsets after a
restart, and an insert-only MERGE of rows already inserted inserts nothing, so re-running a batch
whose MERGE did commit is harmless (idempotent by construction, no transaction ids needed). The
first batch creates the table with a plain append; if the job dies after that commit, the re-run
finds the table and merges.

A MERGE commits after reading the table; a concurrent commit that removed files it read
(``make lake-optimize`` compacting them) makes it fail with one of Delta's DELTA_CONCURRENT_*
conflicts. The MERGE is then simply run again (:data:`ATTEMPTS` times), as the rows it would
insert are still not there.
"""

from __future__ import annotations

import sys
import time

from delta.tables import DeltaTable
from py4j.protocol import Py4JJavaError
from pyspark.errors.exceptions.captured import CapturedException
from pyspark.sql import DataFrame

from spark.lake import delta_commits, is_concurrent_conflict

#: How often one batch's MERGE is tried when concurrent commits conflict with it.
ATTEMPTS = 5


class MergeOnId:
    """The ``foreachBatch`` function: insert the batch's rows whose messageId is not in the
    Delta table at ``path`` yet."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        spark = batch.sparkSession
        rows = batch.dropDuplicates(["messageId"])
        if not delta_commits(spark, self.path):
            rows.write.format("delta").mode("append").partitionBy("event_date").save(self.path)
            return
        for attempt in range(1, ATTEMPTS + 1):
            try:
                (
                    DeltaTable.forPath(spark, self.path)
                    .alias("t")
                    .merge(rows.alias("s"), "t.messageId = s.messageId")
                    .whenNotMatchedInsertAll()
                    .execute()
                )
                return
            except (CapturedException, Py4JJavaError) as exc:
                if attempt == ATTEMPTS or not is_concurrent_conflict(exc):
                    raise
                print(
                    f"spark-lake: events batch {batch_id}: MERGE lost a race with a concurrent "
                    f"commit, attempt {attempt + 1} of {ATTEMPTS}",
                    file=sys.stderr,
                    flush=True,
                )
                time.sleep(0.2 * attempt)
