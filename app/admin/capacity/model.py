"""The sizing arithmetic of ``python -m app plan`` (pure; docs/operations.md, "Sizing a
pipeline", states the same formulas for an operator).

With ``r`` new ids per second over ``P`` partitions (Kafka's murmur2 partitioner spreads
distinct ids evenly: the ids held per partition in bench/results-scale.md), a
partition takes ``r / P`` new ids per second and keeps each for the window, the allowed
lateness and at most one age-out bucket (``tables/window.py``: a bucket goes once all of it is
that far behind). So it would hold ``r / P * (W + L + bucket)`` ids; the cap holds it at
``DEDUPE_MAX_IDS_PER_PARTITION``, and then the effective window is ``cap / (r / P)``.
Everything else is the ids held times a measured figure (``figures.json``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from app.admin.capacity.figures import Figure
from tables.window import derived_bucket

#: Length of a canonical UUID in text (``tables/keys.py`` stores those in 17 bytes).
UUID_TEXT = 36
#: A canonical UUID on disk: a tag byte and its 16 bytes (``tables/keys.py``).
UUID_ON_DISK = 17


@dataclass(frozen=True)
class Load:
    """What the operator expects and how the pipeline is set up."""

    new_ids_per_second: float
    events_per_second: float
    window: float
    allowed_lateness: float
    bucket: float  # 0: derived from the window, as the worker does
    id_length: int
    disk_key_bytes: int  # an id's key on disk (tables/keys.py): 17 for a canonical UUID
    partitions: int
    workers: int
    cap: int
    min_window: float
    replication: int


@dataclass(frozen=True)
class Plan:
    """The figures the report prints. Sizes in bytes, times in seconds, rates per second."""

    new_ids_per_partition: float
    keep_seconds: float  # how long an id stays held: window + lateness + one bucket
    ids_needed_per_partition: float  # without a cap
    ids_held_per_partition: float
    effective_window: float
    capped: bool
    short: bool  # the effective window is below the minimum window
    disk_bytes_per_id: float
    disk_per_partition: float
    changelog_bytes_per_id: float
    changelog_per_partition: float
    restore_seconds_per_partition: float
    partitions_per_worker: int
    restore_seconds_per_worker: float
    memory_per_worker: float
    busiest_worker_events: float
    headroom: float  # a worker's measured capacity over its load (> 1: room to spare)
    min_partitions_for_rate: int
    partitions_for_window: int  # with this cap, the partitions that keep the whole window
    cap_for_window: int  # with these partitions, the cap that keeps the whole window
    eviction_too_slow: bool  # at the cap, a partition takes new ids faster than it evicts them
    min_partitions_for_eviction: int


def plan(load: Load, figures: dict[str, Figure]) -> Plan:
    f = {name: fig.value for name, fig in figures.items()}
    p = load.partitions
    r_p = load.new_ids_per_second / p
    bucket = load.bucket or derived_bucket(load.window)
    keep = load.window + load.allowed_lateness + bucket
    needed = r_p * keep
    held = min(needed, float(load.cap))
    capped = needed > load.cap
    effective = load.window if r_p == 0 else min(load.window, load.cap / r_p)
    # An id is on disk once, as its key: the bytes of its disk form past the compact UUID's 17,
    # uncompressed, bound what other shapes add.
    extra_key = max(load.disk_key_bytes - UUID_ON_DISK, 0)
    disk_per_id = f["disk_bytes_per_uuid_id"] + extra_key
    # The changelog keeps every id as written: the measured figure is for 36-character ids.
    changelog_per_id = f["changelog_bytes_per_uuid_id"] + max(load.id_length - UUID_TEXT, 0)
    per_worker = math.ceil(p / min(load.workers, p))
    restore_rate = f["restore_records_per_second"]
    busiest = load.events_per_second * per_worker / p
    capacity = f["worker_events_per_second"]
    evict_rate = f["evictions_per_second_at_cap"]
    return Plan(
        new_ids_per_partition=r_p,
        keep_seconds=keep,
        ids_needed_per_partition=needed,
        ids_held_per_partition=held,
        effective_window=effective,
        capped=capped,
        short=effective < min(load.min_window, load.window),
        disk_bytes_per_id=disk_per_id,
        disk_per_partition=held * disk_per_id,
        changelog_bytes_per_id=changelog_per_id,
        changelog_per_partition=held * changelog_per_id,
        restore_seconds_per_partition=held / restore_rate,
        partitions_per_worker=per_worker,
        restore_seconds_per_worker=held * per_worker / restore_rate,
        memory_per_worker=max(f["worker_rss_mib_at_scale"], f["worker_rss_mib_under_load"]) * 2**20,
        busiest_worker_events=busiest,
        headroom=math.inf if busiest == 0 else capacity / busiest,
        min_partitions_for_rate=max(1, math.ceil(load.events_per_second / capacity)),
        partitions_for_window=max(1, math.ceil(load.new_ids_per_second * keep / load.cap)),
        cap_for_window=math.ceil(needed),
        eviction_too_slow=capped and r_p >= evict_rate,
        min_partitions_for_eviction=max(1, math.ceil(load.new_ids_per_second / evict_rate)),
    )
