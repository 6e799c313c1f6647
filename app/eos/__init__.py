"""Exactly-once processing on Faust that really holds: one Kafka transaction per partition task.

faust-streaming's own ``exactly_once`` does not hold for a dedup worker (see
``../shared/FAUST-EOS.md``): output is sent outside the transaction, changelog records slip into
the next transaction, the local store keeps writes of aborted transactions and commit errors are
swallowed. This package replaces Faust's ``TransactionManager`` and keeps Faust doing what it
does well (the worker CLI, agents, tables, group membership, rebalancing, recovery, standbys,
the web server).

The unit of work is a *task* (``task.py``): partition number ``p`` of the co-partitioned source
topics, with one transactional producer (``producer.py``,
``transactional.id = "<app id>-<input topic>-<p>"``, stable across deploys, so a new owner of
``p`` fences the old one). Where each part of a record's effect is committed:

- its **output** (clean, dead-letter or repartition record): ``TaskBatch.send`` (``batch.py``)
  adds it to the task's open batch for the target partition (``collector.py``);
- its **changelog record**: the table write only stages it in its store
  (``tables/transactional.py``); at the commit, ``commit.py`` pulls the partition's staged
  writes from every store the factory registered and adds them to the same collector;
- its **offset**: ``TaskBatch.records`` counts a record as processed once the agent's loop
  body finished with it, and the commit adds the offsets with ``send_offsets_to_transaction``.

All three go to the broker in the task's one transaction, committed in numbered steps by
``commit.py`` every ``DEDUPE_COMMIT_INTERVAL`` (the manager's loop, ``manager.py``), and
``lifecycle.py`` acts on the outcome: committed -> the stores apply the staged writes with the
changelog offset (``tables.store.TransactionalStore.commit_partition``); aborted or failed ->
they drop them and the partition is re-read; fenced -> the task stops. So RocksDB never holds a
write that did not commit, and a recovery replays only committed changelog records
(read_committed).

The rest: ``broker.py`` asks the broker (committed offsets, open transactions, the first
committed record in a range); ``guards.py`` makes sure no record is skipped (the gap check, the
stall watchdog); ``consumer.py`` patches Faust's consumer (records of the source topics reach
the agent one fetched batch at a time); ``positions.py`` says where a task starts reading after
a rebalance; ``hanging.py`` ends a transaction the broker left open on a task's changelog
partition (its markers dropped) by committing through it. ``txn_protocol.py`` chooses the Kafka
transaction protocol at start-up (``DEDUPE_TRANSACTION_PROTOCOL``); ``txn_v2.py`` makes a
task's producer run transactions v2 (KIP-890) when chosen, with the requests of
``txn_messages.py``. Calls run one way: manager ->
lifecycle, commit, guards, positions, hanging, batch -> producer, broker -> task -> collector.
Nothing imports the manager but its transport.
"""

from app.eos.batch import (
    YIELD_EVERY,
    BatchHandler,
    BatchScope,
    SourceRecord,
    TaskBatch,
    TaskTransaction,
    batch_partition,
)
from app.eos.broker import GAP_POLL, BrokerReader
from app.eos.collector import MAX_BATCH_BYTES, RecordCollector
from app.eos.commit import CommitResult, Committer, Outcome
from app.eos.consumer import Consumer, ConsumerThread
from app.eos.manager import TaskTransactionManager, Transport
from app.eos.producer import TransactionalProducers, is_fenced, send_lingering
from app.eos.task import Task, TaskState

__all__ = [
    "GAP_POLL",
    "MAX_BATCH_BYTES",
    "YIELD_EVERY",
    "BatchHandler",
    "BatchScope",
    "BrokerReader",
    "CommitResult",
    "Committer",
    "Consumer",
    "ConsumerThread",
    "Outcome",
    "RecordCollector",
    "SourceRecord",
    "Task",
    "TaskBatch",
    "TaskState",
    "TaskTransaction",
    "TaskTransactionManager",
    "TransactionalProducers",
    "Transport",
    "batch_partition",
    "is_fenced",
    "send_lingering",
]
