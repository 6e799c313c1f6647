"""What ``seen_ids`` holds for an id, and the window arithmetic over it: pure functions with
table-driven tests (``tests/unit/app/test_rules_window.py``).

A held id maps to an Entry: its first-seen time (ms, the record time of the copy that was
forwarded), the block of its insertion sequence in its partition (the block's first sequence
number, :func:`block_start`), with ``DEDUPE_COUNT_REPEATS`` how many repeats of it were dropped
since (for the lookup endpoint; each count costs a changelog record and a state write per
repeat, so it is off by default and the field stays 0) and, with ``DEDUPE_VERIFY_CONTENT``, a
short hash of the forwarded copy's content. A
record is a repeat when its id is held and was first seen less than the window W before the
record's time:

    duplicate  <=>  held and record_ms - first_seen_ms < W

so a copy at first_seen + W - 1 ms is dropped and one at first_seen + W is forwarded (W itself
is outside the window) and becomes the new first sighting. With ``DEDUPE_WINDOW_FROM=first_seen``
(the default) a repeat never moves first_seen; with ``last_seen`` a repeat later than it re-arms
the id's clock (:func:`rearms`), so first_seen then means "the sighting that armed the window".
The decision depends only on record times and held entries, never on the wall clock or on when
age-out ran, so a replay decides exactly as the first run did. (Copies with a time before the
first sighting, out-of-order, count as repeats.) A copy whose content hash differs from the held
one is neither: it reuses the id (:func:`judge`).
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

import numpy as np

#: The layout of an encoded entry (big-endian): first-seen ms, sequence, repeats, then the
#: content hash when kept. Code that reads raw entries without decoding them (the counts'
#: upkeep, ``tables/seen_ids/store.py``, and the sweep) slices with these, so the layout has
#: one home.
FIRST_SEEN = slice(0, 8)
SEQ = slice(8, 16)
#: First-seen ms and sequence together: an entry whose sighting is unchanged (a repeat
#: counted) changes no count and no summary mark.
SIGHTING = slice(0, 16)
REPEATS = slice(16, 20)
CONTENT = slice(20, None)
#: First-seen ms and sequence read in one call: the decision reads them for every held id.
sighting_of = struct.Struct(">QQ").unpack_from


@dataclass(frozen=True, slots=True)
class Entry:
    """What ``seen_ids`` holds for an id."""

    first_seen_ms: int
    seq: int
    repeats: int = 0
    #: Hash of the forwarded copy's content (``DEDUPE_VERIFY_CONTENT``); b"": not kept.
    content: bytes = b""

    def encode(self) -> bytes:
        return encode_entry(self.first_seen_ms, self.seq, self.repeats, self.content)

    @classmethod
    def decode(cls, value: bytes) -> Entry:
        return cls(
            int.from_bytes(value[FIRST_SEEN], "big"),
            int.from_bytes(value[SEQ], "big"),
            int.from_bytes(value[REPEATS], "big"),  # b"" (16-byte entries) -> 0
            value[CONTENT],
        )

    def repeated(self) -> Entry:
        """The same entry with one more repeat dropped (first sighting unchanged)."""
        return Entry(self.first_seen_ms, self.seq, self.repeats + 1, self.content)


def repeated_entry(encoded: bytes) -> bytes:
    """``Entry.decode(encoded).repeated().encode()`` without the object: the write of every
    repeat counted, so the held-id decision makes no Entry."""
    repeats = int.from_bytes(encoded[REPEATS], "big") + 1
    return encoded[SIGHTING] + min(repeats, 0xFFFFFFFF).to_bytes(4, "big") + encoded[CONTENT]


def encode_entry(first_seen_ms: int, seq: int, repeats: int = 0, content: bytes = b"") -> bytes:
    """``Entry(first_seen_ms, seq, repeats, content).encode()`` without the object (a first
    sighting encodes one per forwarded record): 20 bytes, plus the content hash when kept."""
    entry = (
        first_seen_ms.to_bytes(8, "big")
        + seq.to_bytes(8, "big")
        + min(repeats, 0xFFFFFFFF).to_bytes(4, "big")
    )
    return entry + content if content else entry


def rearms(first_seen_ms: int, record_ms: int, last_seen: bool) -> bool:
    """A repeat at ``record_ms`` moves the id's clock to it: only under ``last_seen``, and only
    forward (an out-of-order copy behind the armed time never shortens the id's life).

    ``first_seen`` is Flink's deduplication state TTL (``StateTtlConfig.UpdateType
    .OnCreateAndWrite`` in flink-table-runtime's ``StateTtlConfigUtil``: the keep-first-row
    state is written once); ``last_seen`` is ``OnReadAndWrite``, Tenzir's ``write_timeout``
    against its ``create_timeout``: for ids that repeat as long as they are alive."""
    return last_seen and record_ms > first_seen_ms


class Verdict(enum.Enum):
    FIRST = "first"
    REPEAT = "repeat"
    #: Inside the window, but the content differs from the forwarded copy's: a client reused
    #: the id for another event. Neither dropped nor forwarded (dead-lettered).
    REUSED = "reused"


def judge(held: Entry | None, record_ms: int, window_ms: int, content: bytes = b"") -> Verdict:
    """What a copy is: a first sighting, a repeat, or (both hashes kept and different) another
    event reusing the id (a repeat: held, and first seen less than ``window_ms`` before the
    record). An entry kept without a hash cannot tell: a repeat."""
    if held is None:
        return Verdict.FIRST
    return judge_held(held.first_seen_ms, held.content, record_ms, window_ms, content)


def judge_held(
    first_seen_ms: int, held_content: bytes, record_ms: int, window_ms: int, content: bytes
) -> Verdict:
    """:func:`judge` of a held entry given by its fields (the decision reads them from the
    encoded entry, without an Entry)."""
    if record_ms - first_seen_ms >= window_ms:
        return Verdict.FIRST
    if content and held_content and content != held_content:
        return Verdict.REUSED
    return Verdict.REPEAT


def bucket_start(timestamp_ms: int, bucket_ms: int) -> int:
    """Start of the time bucket that holds ids first seen at ``timestamp_ms``."""
    return timestamp_ms - timestamp_ms % bucket_ms


#: Ids are counted per age rank (``tables/slot_counts.py``): the slot of their first sighting, at
#: least this many slots to an age-out bucket, then the block of their insertion sequence.
SLOTS_PER_BUCKET = 16
#: Blocks of sequence numbers to the size cap, at least (at most twice as many: a block is a
#: power of two): the cap cuts at a block's edge, so at most this share of the cap more than it
#: must.
BLOCKS_PER_CAP = 256
#: When the size cap cuts, it cuts down to the cap less this share of it, so the sweep that
#: deletes what was cut runs once per that many new ids, not once per new id.
CAP_SLACK_DIVISOR = 100


def block_size(cap: int) -> int:
    """Sequence numbers per block under a size cap of ``cap`` ids: the greatest power of two
    not over a :data:`BLOCKS_PER_CAP`-th of it (so 256 to 512 blocks to the cap). A power of
    two, so that a block's start, which is what an entry keeps (:func:`block_start`), is a
    number whose low bytes are zero."""
    return 1 << (max(1, cap // BLOCKS_PER_CAP).bit_length() - 1)


def block_start(seq: int, block: int) -> int:
    """The sequence an entry keeps: the first of its block. The counts and the cap need no
    more (an id's rank is its block), and the low bits of a sequence number are the most
    random field of an entry, stored with every id: zeroed, zstd packs an entry into about
    2 bytes less (``bench/results-scale.md``)."""
    return seq - seq % block


def rank_of(encoded_entry: bytes, slot_ms: int, block: int) -> tuple[int, int]:
    """The age rank of an encoded :class:`Entry` (``tables/slot_counts.py``): the start of the
    slot of its first sighting, then the block of its sequence, cut from its bytes."""
    first_seen = int.from_bytes(encoded_entry[FIRST_SEEN], "big")
    return first_seen - first_seen % slot_ms, int.from_bytes(encoded_entry[SEQ], "big") // block


def slot_width(bucket_ms: int) -> int:
    """The slot of a bucket ``bucket_ms`` wide: the bucket divided by the least number from
    :data:`SLOTS_PER_BUCKET` to four times it that divides it (slots tile buckets, so the
    window's cutoff, on a bucket's edge, is on a slot's), else the whole bucket."""
    for k in range(SLOTS_PER_BUCKET, 4 * SLOTS_PER_BUCKET + 1):
        if bucket_ms % k == 0:
            return bucket_ms // k
    return bucket_ms


def window_cutoff(stream_ms: int, window_ms: int, lateness_ms: int, bucket_ms: int) -> int:
    """Ids first seen before this time are out of the window of every record not later than
    ``lateness_ms`` behind the partition's stream time. It moves a bucket at a time (each move
    starts a sweep of the ids, so it moves rarely: ids outlive the window by at most a bucket).
    """
    t = stream_ms - window_ms - lateness_ms
    return bucket_start(t, bucket_ms) if t > 0 else 0


@dataclass(frozen=True, slots=True)
class Marks:
    """What the summary and the counts keep of many encoded entries."""

    #: The greatest sequence number and first sighting (8 bytes each, big-endian).
    top_seq: bytes
    newest: bytes
    #: (slot start, sequence block) -> how many of the entries have that rank.
    ranks: dict[tuple[int, int], int]


def marks_of(entries: list[bytes], slot_ms: int, block: int) -> Marks | None:
    """The :class:`Marks` of ``entries`` in whole-array steps; None when they are not all of one
    length of at least 16 bytes (then one by one)."""
    n = len(entries)
    if n == 0:
        return None
    width = len(entries[0])
    joined = b"".join(entries)
    if width < 16 or len(joined) != width * n or min(map(len, entries)) != width:
        return None
    # The big-endian 8-byte fields read in place, one row per entry, then as native numbers.
    first_seen = np.ndarray((n,), ">u8", joined, FIRST_SEEN.start, (width,)).astype(np.uint64)
    seq = np.ndarray((n,), ">u8", joined, SEQ.start, (width,)).astype(np.uint64)
    slots = first_seen // np.uint64(slot_ms)
    blocks = seq // np.uint64(block)
    # The ranks as one number each, (slot - lowest) * span + (block - lowest), so that counting
    # them is a sort of one array (a commit's first sightings fall in a few ranks): np.unique
    # over (slot, block) rows views them as structured records, which costs far more.
    s0, b0 = int(slots.min()), int(blocks.min())
    span = int(blocks.max()) - b0 + 1
    ranks: dict[tuple[int, int], int]
    if (int(slots.max()) - s0 + 1) * span < 1 << 63:
        flat = (slots - np.uint64(s0)) * np.uint64(span) + (blocks - np.uint64(b0))
        found, counts = np.unique(flat, return_counts=True)
        ranks = {
            ((s0 + k // span) * slot_ms, b0 + k % span): c
            for k, c in zip(found.tolist(), counts.tolist(), strict=True)
        }
    else:  # ranks too far apart to number in 64 bits
        rows, counts = np.unique(np.stack((slots, blocks), 1), axis=0, return_counts=True)
        ranks = {
            (s * slot_ms, b): c for (s, b), c in zip(rows.tolist(), counts.tolist(), strict=True)
        }
    return Marks(
        top_seq=int(seq.max()).to_bytes(8, "big"),
        newest=int(first_seen.max()).to_bytes(8, "big"),
        ranks=ranks,
    )


def effective_window_ms(record_ms: int, oldest_first_seen_ms: int | None) -> int | None:
    """How far back the partition still remembers ids, seen from ``record_ms``."""
    return None if oldest_first_seen_ms is None else max(record_ms - oldest_first_seen_ms, 0)


#: Without ``DEDUPE_BUCKET``, the age-out bucket is the window divided by this, at most
#: :data:`MAX_DERIVED_BUCKET`: ids then outlive the window by at most 1% (and an hour).
BUCKET_DIVISOR = 100
MAX_DERIVED_BUCKET = 3600.0


def derived_bucket(window: float) -> float:
    """The age-out bucket when ``DEDUPE_BUCKET`` is not set: ``min(1h, window / 100)``.

    An id leaves at most one bucket after it could (the window's cutoff moves a bucket at a
    time: :func:`window_cutoff`), so
    a bucket this size keeps ids at most 1% (and at most an hour) past the window. Any window
    from 1s up gives a bucket of at least 10ms; the default 28-day window keeps the 1h bucket.
    """
    return min(MAX_DERIVED_BUCKET, window / BUCKET_DIVISOR)
