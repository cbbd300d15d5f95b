"""Listing pages bounded in bytes as well as in count: a page stops before PAGE_BYTES, well under
gRPC's 4 MiB message limit, and holds at least one item however large."""

from __future__ import annotations

from typing import Iterable

PAGE_BYTES = 2 << 20


def fitting(sizes: Iterable[int], limit: int = PAGE_BYTES) -> int:
    """How many of the first items fit in `limit` bytes (`sizes` is read only that far)."""
    n = total = 0
    for size in sizes:
        total += size
        if total > limit and n:
            return n
        n += 1
    return n
