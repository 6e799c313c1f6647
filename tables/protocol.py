"""What a transactional table's store promises the transaction layer (``app.eos``), and the
one piece of context the layer hands the tables: the partition being processed.

The transaction layer imports these; tables import nothing from the app. Calls run one way:
the layer pulls each store's staged writes at commit (they are the transaction's changelog
records) and tells the store whether the transaction committed; a store never calls the layer.
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Protocol


def changelog_topic(app_id: str, table: str) -> str:
    """The changelog topic of ``table`` (Faust's name for it: ``<app id>-<table>-changelog``)."""
    return f"{app_id}-{table}-changelog"


#: The partition whose records are being processed (set by the transaction layer around a
#: batch; tables are co-partitioned with the source topics, so a write goes to this partition).
processing_partition: ContextVar[int | None] = ContextVar("dedupe_batch_partition", default=None)


class StagedState(Protocol):
    """State whose changes for a partition wait for that partition's transaction."""

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        """Apply the staged writes of ``partition`` (the transaction committed); the offset is
        that of the transaction's last record in this store's changelog (None: none)."""

    def discard_partition(self, partition: int) -> None:
        """Drop the staged writes of ``partition`` (the transaction did not commit)."""


class ChangelogSource(StagedState, Protocol):
    """A store whose staged writes are its changelog records."""

    def changelog_records(self, partition: int) -> list[tuple[bytes, bytes | None]]:
        """The open transaction's writes to ``partition`` (value None: a delete), one per key
        (the last write of a key wins), to send to the changelog before the commit."""
        ...

    def rebuild_partition(self, partition: int) -> None:
        """Drop the state of ``partition``: the next recovery rebuilds it from the changelog."""


class SourceOffsetStore(Protocol):
    """A store that keeps each transaction's source offsets (see
    ``TaskTransactionManager.keep_source_offsets``)."""

    def stage_source_offsets(self, partition: int, value: bytes) -> None: ...

    def source_offsets(self, partition: int) -> dict[str, int]: ...

    def source_offsets_at(self, partition: int) -> int | None:
        """The changelog offset of the record the source offsets came from, when a live commit
        applied it and it is not confirmed yet (None: read from the committed changelog)."""
