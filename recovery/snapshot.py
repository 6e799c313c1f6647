"""Portable snapshots of a worker's state: sorted SST files per partition and column family, and
a manifest that says whose state it is and how far into each changelog it reaches.

A snapshot reads each partition database of a data dir read-only (no lock: the worker may keep
running; the view is the database at the moment it is opened, whole transactions only, since
each commit is one atomic write batch) and writes every column family as one SST file in key
order (``SstFileWriter``, Zstandard: a format independent of the options the database was
written with). Restoring ingests those files into fresh databases, which RocksDB links in
without rewriting a key, and the worker's bulk restorer then reads only the changelog after the
offset each partition holds (``recovery/restore.py``).

The manifest is checked before anything is written: a snapshot of another pipeline (app id,
input topic, partition count), with a file missing, truncated or changed (size and SHA-256 of
each), or older than the caller allows (a compacted changelog drops tombstones after its
``delete.retention.ms``, so an older copy could bring back ids deleted since) is refused, with
every problem listed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rocksdict import (
    AccessType,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
)

from tables.data_dir import open_data_dir
from tables.formats import SNAPSHOT
from tables.rocks import META_CF, OFFSET_KEY, RESTORING_KEY, PartitionDB

log = logging.getLogger(__name__)

#: 2: ``seen_ids`` keys in their compact disk form (``tables/keys.py``); 1: every key as written.
#: A snapshot's files hold the databases' keys as they are, so another format is refused (the
#: versions and the rule: ``tables/formats.py``).
FORMAT = SNAPSHOT.current
MANIFEST = "manifest.json"
_DB = re.compile(r"(?P<table>[a-z_]+)-(?P<partition>\d+)\.db")


@dataclass(frozen=True)
class Identity:
    """Whose state a snapshot is: it restores only into the same pipeline."""

    app_id: str
    input_topic: str
    partitions: int


@dataclass
class PartitionCopy:
    table: str
    partition: int
    #: The changelog offset the copy holds data through (None: nothing committed yet).
    offset: int | None
    #: Column family -> (file name, keys, bytes, sha256); empty families have no file.
    families: dict[str, tuple[str, int, int, str]] = field(default_factory=dict)


@dataclass
class Manifest:
    identity: Identity
    created_ms: int
    copies: list[PartitionCopy]
    format: int = FORMAT

    def encode(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def decode(cls, text: str) -> Manifest:
        raw = json.loads(text)
        return cls(
            identity=Identity(**raw["identity"]),
            created_ms=int(raw["created_ms"]),
            copies=[
                PartitionCopy(
                    c["table"],
                    int(c["partition"]),
                    c["offset"],
                    {
                        k: (str(f), int(n), int(b), str(h))
                        for k, (f, n, b, h) in c["families"].items()
                    },
                )
                for c in raw["copies"]
            ],
            format=int(raw["format"]),
        )


def partition_dbs(tables_dir: Path) -> list[tuple[str, int, Path]]:
    """The partition databases in ``tables_dir``: (table, partition, path), sorted."""
    found = []
    for path in tables_dir.iterdir() if tables_dir.exists() else ():
        match = _DB.fullmatch(path.name)
        if match and path.is_dir():
            found.append((match["table"], int(match["partition"]), path))
    return sorted(found)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def take(
    tables_dir: Path,
    dest: Path,
    identity: Identity,
    progress: Callable[[str], None] = log.info,
) -> Manifest:
    """Write a snapshot of every partition database in ``tables_dir`` into ``dest`` (created;
    must not exist)."""
    dbs = partition_dbs(tables_dir)
    if not dbs:
        raise ValueError(f"no partition database in {tables_dir}: nothing to snapshot")
    dest.mkdir(parents=True)
    copies = []
    for table, partition, path in dbs:
        started = time.monotonic()
        copy = _copy_partition(table, partition, path, dest)
        keys = sum(f[1] for f in copy.families.values())
        progress(
            f"{path.name}: {keys:,} keys through changelog offset {copy.offset} "
            f"in {time.monotonic() - started:.1f}s"
        )
        copies.append(copy)
    manifest = Manifest(identity, int(time.time() * 1000), copies)
    (dest / MANIFEST).write_text(manifest.encode())
    return manifest


def _copy_partition(table: str, partition: int, path: Path, dest: Path) -> PartitionCopy:
    names = Rdict.list_cf(str(path), Options(raw_mode=True))
    options = Options(raw_mode=True)
    # Every table file opened at once: the running worker's compactions may delete files this
    # read-only view still lists (an open file stays readable).
    options.set_max_open_files(-1)
    families = {name: Options(raw_mode=True) for name in names if name != "default"}
    db = Rdict(str(path), options, column_families=families, access_type=AccessType.read_only())
    try:
        meta = db.get_column_family(META_CF)
        if meta.get(RESTORING_KEY) is not None:
            raise ValueError(
                f"{path.name} is being restored from its changelog: take the snapshot once the "
                "worker is ready (GET /ready answers 200)"
            )
        raw = meta.get(OFFSET_KEY)
        offset = None if raw is None else int.from_bytes(raw, "big")
        copy = PartitionCopy(table, partition, offset)
        for name in names:
            family = db if name == "default" else db.get_column_family(name)
            file_name = f"{table}-{partition}.{name}.sst"
            keys = _write_sst(family.items(), dest / file_name)
            if keys:
                target = dest / file_name
                copy.families[name] = (file_name, keys, target.stat().st_size, sha256_of(target))
        return copy
    finally:
        db.close()


def _write_sst(items: Iterable[tuple[Any, Any]], target: Path) -> int:
    writer: SstFileWriter | None = None
    keys = 0
    for key, value in items:  # in key order: what an SST file needs
        if writer is None:
            options = Options(raw_mode=True)
            options.set_compression_type(DBCompressionType.zstd())
            writer = SstFileWriter(options=options)
            writer.open(str(target))
        writer[key] = value
        keys += 1
    if writer is not None:
        writer.finish()
    return keys


def problems(
    src: Path, identity: Identity, max_age_s: float | None, now_ms: int | None = None
) -> list[str]:
    """Why the snapshot in ``src`` must not be restored here (empty: it may)."""
    manifest_path = src / MANIFEST
    if not manifest_path.is_file():
        return [f"{manifest_path} is missing: not a snapshot (or an unfinished one)"]
    try:
        manifest = Manifest.decode(manifest_path.read_text())
    except (ValueError, KeyError, TypeError) as exc:
        return [f"{manifest_path} is unreadable ({exc!r})"]
    found: list[str] = []
    refused = SNAPSHOT.problem(manifest.format, f"the snapshot in {src}")
    if refused is not None:
        found.append(refused)
    theirs, ours = manifest.identity, identity
    for name in ("app_id", "input_topic", "partitions"):
        if getattr(theirs, name) != getattr(ours, name):
            found.append(
                f"{name} is {getattr(theirs, name)!r} in the snapshot, "
                f"{getattr(ours, name)!r} here: the snapshot is another pipeline's"
            )
    now = int(time.time() * 1000) if now_ms is None else now_ms
    age_s = (now - manifest.created_ms) / 1000
    if max_age_s is not None and age_s > max_age_s:
        found.append(
            f"the snapshot is {age_s:,.0f}s old, more than the {max_age_s:,.0f}s allowed "
            "(the changelog may have dropped deletes since)"
        )
    for copy in manifest.copies:
        for file_name, _keys, size, digest in copy.families.values():
            path = src / file_name
            if not path.is_file():
                found.append(f"{file_name} is missing")
            elif path.stat().st_size != size:
                found.append(
                    f"{file_name} is {path.stat().st_size} bytes, the manifest says {size}"
                )
            elif sha256_of(path) != digest:
                found.append(f"{file_name} is damaged (its SHA-256 differs from the manifest's)")
    return found


def restore(
    src: Path,
    tables_dir: Path,
    open_db: Callable[[Path, tuple[str, ...]], PartitionDB],
    progress: Callable[[str], None] = log.info,
) -> Manifest:
    """Ingest the checked snapshot in ``src`` into fresh databases in ``tables_dir`` (which must
    hold none). ``open_db(path, extra column families)`` opens a database as the store does."""
    if partition_dbs(tables_dir):
        raise ValueError(
            f"{tables_dir} already holds partition databases: stop the worker and move its "
            "data dir away before restoring a snapshot into it"
        )
    manifest = Manifest.decode((src / MANIFEST).read_text())
    # The databases about to be written are this version's layout: say so (tables/data_dir.py;
    # a data dir left by a newer version is refused here, before anything is written).
    open_data_dir(tables_dir)
    for copy in manifest.copies:
        path = tables_dir / f"{copy.table}-{copy.partition}.db"
        extra = tuple(sorted(n for n in copy.families if n not in ("default", META_CF)))
        pdb = open_db(path, extra)
        try:
            opts = IngestExternalFileOptions()
            opts.set_move_files(False)  # the snapshot stays whole
            for name, (file_name, _keys, _size, _digest) in copy.families.items():
                family = (
                    pdb.db
                    if name == "default"
                    else pdb.meta
                    if name == META_CF
                    else pdb.extra[name]
                )
                family.ingest_external_file([str(src / file_name)], opts)
            progress(f"{path.name}: restored through changelog offset {copy.offset}")
        except BaseException:
            pdb.close()
            del pdb
            shutil.rmtree(path, ignore_errors=True)
            raise
        pdb.close()
    return manifest
