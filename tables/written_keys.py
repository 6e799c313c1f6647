"""The keys a restore into an empty store may have written already: a bitmap over their hashes.

The index upkeep of every write (``tables/seen_ids/store.py``) needs the value a key replaces,
so each batch of a restore reads its keys back with a multi-get. Into an empty store a key can
be there only if an earlier batch of the same restore wrote it, and with random ids that is
almost never: the multi-get looked for absent keys through every memtable and level-0 file, a
third of a restore of random UUIDs (``bench/results-recovery.md``).

:class:`WrittenKeys` marks each key a batch writes in a bitmap indexed by the key's hash. A key
whose bit is clear was certainly not written by this restore, so its committed value is None
without a read; a key whose bit is set is read as before. A bit can be set by another key (the
read then finds nothing), never cleared, so no key this restore wrote is taken for absent.

Memory: :data:`BITS_PER_RECORD` bits per changelog offset the restore covers (2 bytes; 10M
records: 20 MB), at most :data:`MAX_BYTES` per partition, held only while the partition is being
restored. Each key sets two bits: at 16 bits per key about 1.4% of new keys
are still read when the bitmap is full (with one bit, 6%; each such read looks through every
level-0 file, and a restore compacts nothing until its end); past the cap, more.
"""

from __future__ import annotations

import numpy as np

#: Bits of the bitmap per changelog offset to restore.
BITS_PER_RECORD = 16
#: Largest bitmap of one partition (bytes): 32 MiB, 16 bits per record up to 16.7M records.
MAX_BYTES = 32 * 1024 * 1024
#: Smallest bitmap (bytes).
MIN_BYTES = 1024


class WrittenKeys:
    """Which keys (as written: each one's disk form is one-to-one) a restore into an empty
    store has written so far."""

    __slots__ = ("_bits", "_positions")

    def __init__(self, records: int) -> None:
        """``records``: changelog offsets the restore covers (at least the keys it writes)."""
        size = min(max(records * BITS_PER_RECORD // 8, MIN_BYTES), MAX_BYTES)
        self._bits = np.zeros(size, dtype=np.uint8)
        self._positions = size * 8

    @property
    def nbytes(self) -> int:
        return len(self._bits)

    def mark(self, keys: list[bytes]) -> list[int]:
        """Mark ``keys`` as written; return the positions (in ``keys``) of those that may have
        been written by an earlier call: only their committed values need a read. (Keys of one
        call are looked up before any of them is marked, in whole-array steps.)"""
        if not keys:
            return []
        hashes = np.fromiter(map(hash, keys), dtype=np.int64, count=len(keys)).view(np.uint64)
        # Two bits per key: at its whole 64-bit hash and at its upper half, modulo the bitmap's
        # size (at most 2**28 bits, so far fewer bits than either number has).
        size = np.uint64(self._positions)
        places = [self._place(hashes % size), self._place((hashes >> np.uint64(32)) % size)]
        bits = self._bits
        maybe_mask = np.ones(len(keys), dtype=bool)
        for byte, bit in places:
            maybe_mask &= (bits[byte] & bit) != 0
        for byte, bit in places:
            bits[byte] |= bit
            # Keys of this call that share a byte: only the last one's bit was kept; set the
            # others again (a few per batch of 20,000 in a bitmap of millions of bytes).
            lost = np.flatnonzero((bits[byte] & bit) == 0)
            while lost.size:
                bits[byte[lost]] |= bit[lost]
                lost = lost[(bits[byte[lost]] & bit[lost]) == 0]
        maybe: list[int] = np.flatnonzero(maybe_mask).tolist()
        return maybe

    @staticmethod
    def _place(slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The byte and the bit (a mask) of each bitmap position in ``slots``."""
        byte = slots >> np.uint64(3)
        bit = np.left_shift(np.uint8(1), (slots & np.uint64(7)).astype(np.uint8))
        return byte, bit
