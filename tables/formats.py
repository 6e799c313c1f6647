"""The versions of the formats that outlive a worker, and the rule that reads or refuses each:
their one home (pure, ``tests/unit/tables/test_formats.py``).

Three formats are read by a later worker than the one that wrote them:

- the **data dir**: the partition databases below the tables dir (one RocksDB database per
  partition, the ids in the default column family, the bookkeeping in ``dedupe-meta``:
  ``tables/rocks.py``). Its version is in :data:`DATA_DIR_FILE`, written when a store first
  opens the directory (``tables/data_dir.py``); a directory without the file is the first
  layout, version 1 (every data dir written before the file existed).
- the **snapshot**: the manifest's ``format`` (``recovery/snapshot.py``); 2 since the ids went
  into their compact disk form (``tables/keys.py``), 1 before.
- the **changelog**: keys as written (text ids, ``tables/keys.py``), values in the layout of
  ``tables/window.py``, and each transaction's source-offsets record
  (``tables/source_offsets.py``), which carries the version under :data:`CHANGELOG_FIELD`:
  once per transaction, no byte per id. A record without the field is version 1.

The rule is Kafka Streams' for its checkpoint files (``streams/.../state/internals/
OffsetCheckpoint.java``: the version is written first, the read switches on it, and an unknown
one throws "Unknown offset checkpoint version" instead of being guessed at). Here a version this
worker reads (:attr:`Format.reads`) is read; any other is refused with a message that names the
way forward, one for a version older than this worker reads and one for a newer one, so an
older worker stops (:class:`FormatRefused` ends the worker before it is ready) rather than
misread what a newer one wrote. A change of the changelog format ships in
two releases (docs/operations.md "Upgrading"): the first reads the new version and still writes
the old one, the second writes the new one, so no worker of a rolling upgrade meets a record
newer than it reads.
"""

from __future__ import annotations

from dataclasses import dataclass

#: The data dir's version file, in the tables dir next to the partition databases.
DATA_DIR_FILE = "dedupe-format.json"
#: Field of the source-offsets record's JSON object that holds the changelog's version. ``#``
#: is not allowed in a Kafka topic name, so no source topic's offset can be under this key.
CHANGELOG_FIELD = "#format"


class FormatRefused(RuntimeError):
    """Data in a format this worker does not read: it stops rather than misread it (the message
    says what was found, what this worker reads, and the way forward)."""


@dataclass(frozen=True)
class Format:
    """One format: the version this worker writes, the versions it reads, and the way forward
    when it meets another (older: from before :attr:`reads`; newer: from a later worker)."""

    name: str
    current: int
    reads: frozenset[int]
    older: str
    newer: str

    def problem(self, found: int, where: str) -> str | None:
        """Why ``where``, in version ``found``, must not be read here (None: it may be)."""
        if found in self.reads:
            return None
        reads = ", ".join(str(v) for v in sorted(self.reads))
        way = self.newer if found > self.current else self.older
        return f"{where} is in {self.name} format {found}; this worker reads {reads}: {way}"

    def check(self, found: int, where: str) -> None:
        """Raise :class:`FormatRefused` unless version ``found`` of ``where`` is read here."""
        problem = self.problem(found, where)
        if problem is not None:
            raise FormatRefused(problem)


DATA_DIR = Format(
    "data dir",
    current=1,
    reads=frozenset({1}),
    older="stop the worker, move the data dir away and start it with an empty one (the "
    "changelog rebuilds the state), or restore a snapshot taken by this version",
    newer="it was written by a newer version: run that version (or a later one) on it, or "
    "move the data dir away and start with an empty one (the changelog rebuilds the state)",
)
SNAPSHOT = Format(
    "snapshot",
    current=2,
    reads=frozenset({2}),
    older="take a new snapshot with this version, or start without one (the changelog "
    "rebuilds the state)",
    newer="it was taken by a newer version: restore it with that version (or a later one), "
    "or start without one (the changelog rebuilds the state)",
)
CHANGELOG = Format(
    "changelog",
    current=1,
    reads=frozenset({1}),
    older="it is older than every version this worker reads: upgrade through the releases "
    "in between, one at a time (each reads its predecessor's changelog)",
    newer="it was written by a newer version: upgrade this worker to one that reads it "
    "(roll back only to a release that reads it too); never run this version on it",
)
