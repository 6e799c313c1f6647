"""The data dir's version file (:data:`tables.formats.DATA_DIR_FILE`): read and checked when a
store first opens its tables dir, written when it is missing.

Written as Kafka Streams writes its checkpoint files (``OffsetCheckpoint.write``): into a
temporary file, synced, then renamed over the old one, so a crash leaves the old file or the
new one, never half of one. A tables dir without the file but with partition databases was
written before the file existed: the first layout, version 1, and the file is written to say
so; an empty one gets this worker's version.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

from tables.formats import DATA_DIR, DATA_DIR_FILE, FormatRefused

log = logging.getLogger(__name__)

#: The version of a data dir written before the version file existed.
FIRST = 1


def read_version(directory: Path) -> int | None:
    """The version in ``directory``'s file (None: no file). Raises :class:`FormatRefused` when
    the file cannot be read: a guess could misread the databases."""
    path = directory / DATA_DIR_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    try:
        return int(json.loads(text)["format"])
    except (ValueError, KeyError, TypeError) as exc:
        raise FormatRefused(
            f"{path} is unreadable ({exc!r}): restore it from a copy of the data dir, or move "
            "the data dir away and start with an empty one (the changelog rebuilds the state)"
        ) from exc


def write_version(directory: Path, version: int) -> None:
    path = directory / DATA_DIR_FILE
    temp = path.with_name(path.name + ".tmp")
    with temp.open("w") as f:
        f.write(json.dumps({"format": version}) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(temp, path)


def holds_databases(directory: Path) -> bool:
    return any(p.is_dir() and p.name.endswith(".db") for p in directory.iterdir())


def open_data_dir(directory: Path) -> int:
    """Check the version of the tables dir ``directory`` (created if missing) and write its
    file when it has none; the version it is in. Raises :class:`FormatRefused` for a version
    this worker does not read."""
    directory.mkdir(parents=True, exist_ok=True)
    found = read_version(directory)
    if found is None:
        legacy = holds_databases(directory)
        found = FIRST if legacy else DATA_DIR.current
        DATA_DIR.check(found, f"data dir {directory}")
        if legacy:
            log.info(
                "data dir %s: databases without a version file, so format %d (the first); "
                "writing %s",
                directory,
                found,
                DATA_DIR_FILE,
            )
        write_version(directory, found)
        return found
    DATA_DIR.check(found, f"data dir {directory}")
    return found
