"""A set that only answers "surely not" or "maybe": which request ids the PostgreSQL store
(coordinator/store/postgres.py) has ever seen, in about 1.2 bytes a key, so that a submit with a new
idempotency key (nearly all of them) needs no read from the server to know it is new.

A scalable Bloom filter: filters of doubling capacity, each about 1% false positives when full;
a key is added to the newest one. `maybe` is never False for a key that was added.
"""

from __future__ import annotations

import hashlib

BITS_PER_KEY, PROBES = 10, 7  # about 0.8% false positives per filter at its capacity


class _Filter:
    def __init__(self, capacity: int) -> None:
        self.capacity, self.count = capacity, 0
        self.nbits = capacity * BITS_PER_KEY
        self.bits = bytearray(self.nbits // 8 + 1)

    def positions(self, key: str) -> list[int]:
        digest = hashlib.blake2b(key.encode(), digest_size=16).digest()
        a, b = int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1
        return [(a + i * b) % self.nbits for i in range(PROBES)]

    def add(self, key: str) -> None:
        for p in self.positions(key):
            self.bits[p >> 3] |= 1 << (p & 7)
        self.count += 1

    def has(self, key: str) -> bool:
        return all(self.bits[p >> 3] & (1 << (p & 7)) for p in self.positions(key))


class Seen:
    def __init__(self, capacity: int = 65536) -> None:
        self._filters = [_Filter(capacity)]

    def add(self, key: str) -> None:
        newest = self._filters[-1]
        if newest.count >= newest.capacity:
            newest = _Filter(2 * newest.capacity)
            self._filters.append(newest)
        newest.add(key)

    def maybe(self, key: str) -> bool:
        """False: `key` was never added. True: it may have been."""
        return any(f.has(key) for f in self._filters)
