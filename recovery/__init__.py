"""State recovery: a worker's tables rebuilt from their changelogs, kept warm on standbys, and
copied from snapshots. Imports go one way: ``app`` -> ``recovery`` -> ``tables``.

- ``reader.py``: the changelog reader, the one way any of these modules reads a changelog
  (read_committed: aborted transactions and commit markers never reach a store).
- ``restore.py``: a partition read into its store in large write batches (the bulk restore);
  ``bulk.py``: the restores a recovery queues, retried with ``retry.py``'s backoff and limit.
- ``follow.py``: standby partitions followed into their stores.
- ``faust_adapter.py``: Faust's recovery service with the above (a partition's recovery ends
  when its restore reached the end), subclassing the recovery shim of
  ``adapters/faust_privates.py`` (the module that names Faust's private internals).
- ``snapshot.py``: a copy of the stores taken and restored (``app/admin/snapshots.py`` runs it).

The store's side of a restore stays in ``tables/``: the write path it goes through
(``tables/store.py``), the bitmap of keys a restore wrote (``tables/written_keys.py``) and the
partitions' databases (``tables/partitions.py``).

"Settled" has one meaning in this repository: no transaction is open on a partition, its last
stable offset reaches its log end (``app/eos/broker.py``, ``wait_until_settled``). The
recovery's other waits are named for what they wait for: the restore's "restored" and
"compacted".
"""

from __future__ import annotations

from typing import Any

from recovery.bulk import BulkRestores
from recovery.faust_adapter import TransactionalRecovery, TransactionalTableManager
from recovery.follow import Follower
from recovery.reader import ChangelogReader
from recovery.restore import OnProgress, RecordSource, Restorer

__all__ = ["TransactionalTableManager", "install"]


def install(
    app: Any,
    reader: ChangelogReader,
    *,
    restore_source: RecordSource | None = None,
    on_progress: OnProgress | None = None,
) -> None:
    """Give the recovery of ``app`` (built with :class:`TransactionalTableManager`) the
    changelog reader: the restorer of its tables' active partitions (reporting to
    ``on_progress``) reads through ``restore_source`` (default: ``reader`` itself; the fault
    tests wrap it), the follower of their standby partitions through ``reader``. The recovery
    closes it."""
    recovery = app.tables.recovery
    if not isinstance(recovery, TransactionalRecovery):
        raise TypeError(f"the app's recovery is {type(recovery).__name__}, not ours")
    restorer = Restorer(reader if restore_source is None else restore_source, on_progress)
    bulk_restores = BulkRestores(
        restorer,
        highwater=recovery.bulk_highwater,
        store=recovery.bulk_store,
        restored=recovery.bulk_restored,
    )
    recovery.use(bulk_restores, Follower(reader))
