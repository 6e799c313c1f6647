"""What a transactional table's store promises the transaction layer (``app.eos``).

The transaction layer imports these; tables import nothing from the app.
"""

from __future__ import annotations

from typing import Protocol


class StagedState(Protocol):
    """A store whose writes for a partition wait for that partition's transaction."""

    def commit_partition(self, partition: int, changelog_offset: int | None) -> None:
        """Apply the staged writes of ``partition`` (the transaction committed); the offset is
        that of the transaction's last changelog record (None: it wrote no changelog record)."""

    def discard_partition(self, partition: int) -> None:
        """Drop the staged writes of ``partition`` (the transaction did not commit)."""


class SourceOffsetStore(Protocol):
    """A store that keeps each transaction's source offsets (see
    ``TaskTransactionManager.keep_source_offsets``)."""

    def stage_source_offsets(self, partition: int, value: bytes) -> None: ...

    def source_offsets(self, partition: int) -> dict[str, int]: ...
