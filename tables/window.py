"""What ``seen_ids`` holds for an id, and the window arithmetic over it: pure functions with
table-driven tests (``tests/unit/test_rules.py``).

A held id maps to an Entry: its first-seen time (ms, the record time of the copy that was
forwarded), its insertion sequence number in its partition, and how many repeats of it were
dropped since (for the status endpoint; repeats are rare, ~0.6% of traffic, so counting them
costs one changelog record per repeat). A record is a repeat when its
id is held and was first seen less than the window W before the record's time:

    duplicate  <=>  held and record_ms - first_seen_ms < W

so a copy at first_seen + W - 1 ms is dropped and one at first_seen + W is forwarded (W itself
is outside the window) and becomes the new first sighting. A repeat never moves first_seen.
The decision depends only on record times and held entries, never on the wall clock or on when
age-out ran, so a replay decides exactly as the first run did. (Copies with a time before the
first sighting, out-of-order, count as repeats.)
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Entry:
    """What ``seen_ids`` holds for an id."""

    first_seen_ms: int
    seq: int
    repeats: int = 0

    def encode(self) -> bytes:
        return encode_entry(self.first_seen_ms, self.seq, self.repeats)

    @classmethod
    def decode(cls, value: bytes) -> Entry:
        return cls(
            int.from_bytes(value[:8], "big"),
            int.from_bytes(value[8:16], "big"),
            int.from_bytes(value[16:20], "big"),  # b"" (16-byte entries) -> 0
        )

    def repeated(self) -> Entry:
        """The same entry with one more repeat dropped (first sighting unchanged)."""
        return Entry(self.first_seen_ms, self.seq, self.repeats + 1)


def encode_entry(first_seen_ms: int, seq: int, repeats: int = 0) -> bytes:
    """``Entry(first_seen_ms, seq, repeats).encode()`` without the object (a first sighting
    encodes one per forwarded record)."""
    return (
        first_seen_ms.to_bytes(8, "big")
        + seq.to_bytes(8, "big")
        + min(repeats, 0xFFFFFFFF).to_bytes(4, "big")
    )


def is_duplicate(held: Entry | None, record_ms: int, window_ms: int) -> bool:
    """A repeat: the id is held and was first seen less than ``window_ms`` before the record."""
    return held is not None and record_ms - held.first_seen_ms < window_ms


def bucket_start(timestamp_ms: int, bucket_ms: int) -> int:
    """Start of the time bucket that holds ids first seen at ``timestamp_ms``."""
    return timestamp_ms - timestamp_ms % bucket_ms


def index_key(first_seen_ms: int, bucket_ms: int, seq: int) -> bytes:
    """Key of an id in the age-out index: its time bucket, then its insertion sequence, so the
    index lists ids oldest bucket first and, inside a bucket, in insertion order."""
    return bucket_start(first_seen_ms, bucket_ms).to_bytes(8, "big") + seq.to_bytes(8, "big")


def index_key_of(encoded_entry: bytes, bucket_ms: int) -> bytes:
    """``index_key`` of an encoded :class:`Entry`, cut from its bytes (the sequence number's
    8 bytes are the index key's last 8)."""
    first_seen_ms = int.from_bytes(encoded_entry[:8], "big")
    return bucket_start(first_seen_ms, bucket_ms).to_bytes(8, "big") + encoded_entry[8:16]


def bucket_of_index_key(key: bytes) -> int:
    return int.from_bytes(key[:8], "big")


def bucket_expired(
    bucket: int, bucket_ms: int, stream_ms: int, window_ms: int, lateness_ms: int
) -> bool:
    """Every id of the bucket starting at ``bucket`` is out of the window of any record not
    later than ``lateness_ms`` behind the partition's stream time: the bucket can go."""
    return bucket + bucket_ms <= stream_ms - window_ms - lateness_ms


def over_cap(held: int, cap: int) -> bool:
    """The size cap is exceeded: the oldest ids must go."""
    return held > cap


def effective_window_ms(record_ms: int, oldest_first_seen_ms: int | None) -> int | None:
    """How far back the partition still remembers ids, seen from ``record_ms``."""
    return None if oldest_first_seen_ms is None else max(record_ms - oldest_first_seen_ms, 0)
