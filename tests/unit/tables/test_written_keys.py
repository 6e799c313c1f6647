"""``tables.written_keys``: the bitmap of keys a restore into an empty store wrote."""

from __future__ import annotations

import random

from tables.written_keys import MAX_BYTES, MIN_BYTES, WrittenKeys


def test_a_key_marked_before_is_always_reported_and_new_keys_mostly_not() -> None:
    rnd = random.Random(3)
    written = WrittenKeys(20_000)
    first = [rnd.randbytes(17) for _ in range(20_000)]
    assert len(written.mark(first)) < 2_000  # repeats only by collision: about 3% here
    again = rnd.sample(first, 5_000)
    new = [rnd.randbytes(17) for _ in range(5_000)]
    batch = again + new
    maybe = written.mark(batch)
    assert set(range(5_000)) <= set(maybe)  # never "not written" for a key it was given
    false_maybe = len(maybe) - 5_000
    # 16 bits per record, two of them per key: about 1.4% of new keys (one per key: 6%).
    assert false_maybe < 0.03 * 5_000


def test_a_full_bitmap_still_reports_every_written_key() -> None:
    """Past its size (more keys than records announced) it answers "maybe" more often, never
    "not written" for a key it was given."""
    written = WrittenKeys(10)
    keys = [i.to_bytes(8, "big") for i in range(50_000)]
    written.mark(keys)
    assert written.mark(keys) == list(range(50_000))


def test_the_bitmap_size_follows_the_records_within_its_bounds() -> None:
    assert WrittenKeys(0).nbytes == MIN_BYTES
    assert WrittenKeys(1_000_000).nbytes == 2_000_000
    assert WrittenKeys(10**9).nbytes == MAX_BYTES
