"""The round-robin schedule of disjoint pairs: every pair of n ranks met once, in few rounds.

The circle method (as for a sports league): rank 0 stays put while the others rotate one place
per round; in each round rank i meets the rank mirrored across the circle. With n even that is
n - 1 rounds of n / 2 pairs; with n odd one rank sits out each round (it meets the empty seat),
so n rounds of (n - 1) / 2 pairs. The pairs of one round share no rank, so they can be measured
at the same time without a link carrying two measurements. Pure: no communication, no torch.
"""

from __future__ import annotations

Pair = tuple[int, int]


def rounds(n: int) -> list[list[Pair]]:
    """The rounds for ranks 0..n-1; each pair is (low, high); every unordered pair exactly once."""
    if n < 2:
        raise ValueError(f"world_size: a round-robin needs at least 2 ranks, got {n}")
    seats: list[int | None] = list(range(n)) + ([None] if n % 2 else [])
    m = len(seats)
    out = []
    for _ in range(m - 1):
        pairs = []
        for i in range(m // 2):
            a, b = seats[i], seats[m - 1 - i]
            if a is not None and b is not None:
                pairs.append((min(a, b), max(a, b)))
        out.append(sorted(pairs))
        seats = [seats[0], seats[-1], *seats[1:-1]]  # everyone but the first moves one seat on
    return out


def partner(schedule: list[list[Pair]], round_index: int, rank: int) -> int | None:
    """Whom `rank` meets in that round (None when it sits out)."""
    for a, b in schedule[round_index]:
        if rank in (a, b):
            return b if rank == a else a
    return None


def round_count(n: int) -> int:
    """How many rounds `rounds(n)` has, without building it."""
    return n - 1 if n % 2 == 0 else n
