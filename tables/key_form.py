"""How a store's keys look on its disk, and what it does with a database of another form: as
written by default; ``tables.seen_ids_store.SeenIdsStore`` overrides each with the compact forms
of ``tables/keys.py`` and the conversion of ``tables/key_migration.py``."""

from __future__ import annotations

from tables.rocks import PartitionDB


class KeyForm:
    """The keys as written: the form of a store without a compact one."""

    #: The disk form of the keys (:data:`tables.rocks.KEY_FORMAT_KEY`); 0: as written.
    key_format = 0

    @staticmethod
    def disk_key(key: bytes) -> bytes:
        """``key`` as the databases hold it (subclasses with a compact form override both)."""
        return key

    @staticmethod
    def disk_keys(keys: list[bytes]) -> list[bytes]:
        """:meth:`disk_key` of each of ``keys`` (subclasses may do it in whole-list steps)."""
        return keys

    @staticmethod
    def written_key(raw: bytes) -> bytes:
        """A key read from a database, as it was written (the inverse of :meth:`disk_key`)."""
        return raw

    @staticmethod
    def convert_keys(pdb: PartitionDB, found: int, name: str) -> int | None:
        """Convert a database of key form ``found`` in place, and how many keys that rewrote
        (None: it cannot; the database is rebuilt from the changelog)."""
        return None
