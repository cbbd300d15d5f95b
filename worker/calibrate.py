"""How many timed iterations a size gets when the spec says auto (iters 0), and how graph mode
packs them into replays. Pure functions: no torch, no communication.

A timed loop has a fixed cost (the start of the loop, the last op's tail) that a short loop
spreads over too few ops: 20 iterations of an 8 B all_reduce took 50 us each on H200s where 200
took 22 us. So a small op gets as many iterations as fit in TARGET_US, never fewer than
MIN_ITERS (nccl-tests' count, what large sizes get) and never more than MAX_AUTO_ITERS.
Every rank must use the same count (a rank that stops early hangs the others): the caller
agrees on one probe time first (the slowest rank's), then each rank computes the same count.
"""

from __future__ import annotations

import math

TARGET_US = 20_000.0  # the timed loop lasts at least this long
MIN_ITERS = 20
MAX_AUTO_ITERS = 10_000  # 8 B at ~2 us per op would otherwise ask for more
PROBE_ITERS = 5  # ops timed (after the warm-up) to estimate one op's time
GRAPH_OPS = 20  # ops captured per CUDA graph, as nccl-tests -G with its default -n 20


def iterations(probe_us: float, *, target_us: float = TARGET_US, minimum: int = MIN_ITERS,
               cap: int = MAX_AUTO_ITERS) -> int:
    """Iterations of an op that takes `probe_us` each: enough to last `target_us`, within
    [minimum, cap]. A probe of 0 (a clock too coarse to see the op) gets the cap."""
    if not math.isfinite(probe_us) or probe_us < 0:
        raise ValueError(f"probe time must be a finite, non-negative number of us, got {probe_us}")
    if not 1 <= minimum <= cap:
        raise ValueError(f"need 1 <= minimum <= cap, got minimum {minimum}, cap {cap}")
    if probe_us == 0:
        return cap
    return max(minimum, min(cap, math.ceil(target_us / probe_us)))


def graph_plan(iters: int, ops_per_graph: int = GRAPH_OPS) -> tuple[int, int]:
    """(ops captured in one graph, replays) for at least `iters` timed ops: one graph of
    min(iters, ops_per_graph) ops, replayed often enough; the ops timed are their product."""
    if iters < 1 or ops_per_graph < 1:
        raise ValueError(f"need iters >= 1 and ops_per_graph >= 1, got {iters}, {ops_per_graph}")
    per = min(iters, ops_per_graph)
    return per, math.ceil(iters / per)
