"""Point-to-point ping-pong between pairs of ranks: one-way latency and bandwidth per link.

Rank `src` (the initiator) sends `size` bytes to `dst` (the echo), which sends them straight
back; one-way latency = round trip / 2 and bandwidth = size / one-way latency (GB/s, 1e9), the
osu_latency convention. Measuring every ordered pair of a group (all_ordered_pairs) and laying
the bandwidths out with pairwise_matrix points at a slow link or a bad GPU.
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from worker import datacheck
from worker.distutil import NoCounter, percentile, sync, time_loop

MODES = ("blocking", "async")
_TIMED_SEED, _CHECK_SEED = 0, 1
_SENTINEL = 253  # outside the pattern's 0..250, so a transfer that writes nothing is caught
_FIELDS = ("latency_us", "latency_min_us", "latency_p50_us", "bandwidth_gbps", "wrong")


def all_ordered_pairs(n: int) -> list[tuple[int, int]]:
    """Every (src, dst) with src != dst, in row order."""
    return [(i, j) for i in range(n) for j in range(n) if i != j]


def _pattern(start: int, stop: int, size: int, seed: int, device) -> torch.Tensor:
    i = torch.arange(start, stop, device=device, dtype=torch.int64)
    return ((i * 7 + size + seed * 101) % 251).to(torch.uint8)


def _fill(buf: torch.Tensor, seed: int) -> None:
    """Fresh, non-constant bytes that depend on the index, the buffer size and the seed."""
    size = buf.numel()
    for start in range(0, size, datacheck.CHUNK):
        stop = min(start + datacheck.CHUNK, size)
        buf[start:stop].copy_(_pattern(start, stop, size, seed, buf.device))


def _count_wrong(buf: torch.Tensor, seed: int) -> int:
    size = buf.numel()
    wrong = torch.zeros((), dtype=torch.int64, device=buf.device)
    for start in range(0, size, datacheck.CHUNK):
        stop = min(start + datacheck.CHUNK, size)
        wrong += (buf[start:stop] != _pattern(start, stop, size, seed, buf.device)).sum()
    return int(wrong.item())


def _initiator_round(mode: str, peer: int, send: torch.Tensor, recv: torch.Tensor) -> None:
    if mode == "blocking":
        dist.send(send, peer)
        dist.recv(recv, peer)
    else:
        # The receive is posted before waiting on the send. It is issued after the send: NCCL
        # serialises a pair's p2p calls on one stream, so a receive issued first would block the
        # send behind it and deadlock against a peer that echoes only what it has received.
        sent = dist.isend(send, peer)
        received = dist.irecv(recv, peer)
        sent.wait()
        received.wait()


def _echo_round(mode: str, peer: int, buf: torch.Tensor) -> None:
    if mode == "blocking":
        dist.recv(buf, peer)
        dist.send(buf, peer)
    else:
        dist.irecv(buf, peer).wait()
        dist.isend(buf, peer).wait()


def _validate_args(sizes, iters, warmup, mode) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: unknown mode {mode!r} (expected one of {', '.join(MODES)})")
    if not sizes:
        raise ValueError("sizes: at least one size is required")
    if any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError("sizes: every size must be a positive number of bytes")
    if iters < 1:
        raise ValueError("iters: must be at least 1")
    if warmup < 0:
        raise ValueError("warmup: must not be negative")


def _validate_pairs(pairs, n: int) -> list[tuple[int, int]]:
    if n < 2:
        raise ValueError("world_size: ping-pong needs at least 2 ranks")
    pairs = [(0, 1)] if pairs is None else [tuple(p) for p in pairs]
    for p in pairs:
        if len(p) != 2 or not all(isinstance(r, int) and 0 <= r < n for r in p) or p[0] == p[1]:
            raise ValueError(f"pairs: {p!r} is not a pair of two different ranks below {n}")
    return pairs


def ping_pong(sizes: list[int], *, iters: int, warmup: int, mode: str, device, counter=None,
              pairs=None) -> list[dict]:
    """Ping-pong every pair in `pairs` (default [(0, 1)]) at every size, one pair at a time.

    Call on every rank: ranks outside the pair under test wait at a barrier that all ranks pass
    before each (pair, size). The initiator times `iters` round trips after `warmup` untimed
    ones; then one more round trip on fresh data is checked on both ends (the echo's bytes as
    received, the initiator's as returned). `counter` grows by one per send and per receive.

    Returns the same rows on every rank, in (pair, size) order: src, dst, size_bytes,
    latency_us (mean one-way), latency_min_us and latency_p50_us (over iterations),
    bandwidth_gbps (size / mean one-way latency), wrong (bytes wrong on both ends), mode, iters.
    """
    _validate_args(sizes, iters, warmup, mode)
    device = torch.device(device)
    rank, n = dist.get_rank(), dist.get_world_size()
    pairs = _validate_pairs(pairs, n)
    counter = counter if counter is not None else NoCounter()
    # One row of numbers per (pair, size); only the pair's ranks write theirs, then a single sum
    # gives every rank every row (tensors, so it works on NCCL and gloo alike).
    table = torch.zeros(len(pairs) * len(sizes), len(_FIELDS), dtype=torch.float64)
    for p, (src, dst) in enumerate(pairs):
        for s, size in enumerate(sizes):
            sync(device)
            row = table[p * len(sizes) + s]
            if rank == src:
                _initiate(mode, dst, size, iters, warmup, device, counter, row)
            elif rank == dst:
                _echo(mode, src, size, iters, warmup, device, counter, row)
    table = table.to(device)
    dist.all_reduce(table)
    values = table.cpu().tolist()
    rows = []
    for p, (src, dst) in enumerate(pairs):
        for s, size in enumerate(sizes):
            v = dict(zip(_FIELDS, values[p * len(sizes) + s]))
            rows.append(dict(src=src, dst=dst, size_bytes=size, latency_us=v["latency_us"],
                             latency_min_us=v["latency_min_us"], latency_p50_us=v["latency_p50_us"],
                             bandwidth_gbps=v["bandwidth_gbps"], wrong=int(v["wrong"]), mode=mode,
                             iters=iters))
    return rows


def _initiate(mode, dst, size, iters, warmup, device, counter, row) -> None:
    """The initiator's side of one (pair, size): timed round trips, then a checked one."""
    send = torch.empty(size, dtype=torch.uint8, device=device)
    recv = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(send, _TIMED_SEED)

    def round_trip():
        _initiator_round(mode, dst, send, recv)
        counter.value += 2

    for _ in range(warmup):
        round_trip()
    mean_us, times = time_loop(round_trip, iters, device)
    times = sorted(t / 2 for t in times)
    latency = mean_us / 2
    row[0], row[1], row[2] = latency, times[0], percentile(times, 50)
    row[3] = size / latency / 1e3 if latency > 0 else 0.0
    _fill(send, _CHECK_SEED)
    recv.fill_(_SENTINEL)
    round_trip()
    row[4] = _count_wrong(recv, _CHECK_SEED)


def _echo(mode, src, size, iters, warmup, device, counter, row) -> None:
    """The echo's side: return every round trip (as many as the initiator's loops run)."""
    loops = 2 if device.type == "cuda" else 1  # see distutil.time_loop
    buf = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(buf, _TIMED_SEED)  # overwritten by the first receive; no garbage sent
    for _ in range(warmup + loops * iters):
        _echo_round(mode, src, buf)
        counter.value += 2
    buf.fill_(_SENTINEL)
    _echo_round(mode, src, buf)
    counter.value += 2
    row[4] = _count_wrong(buf, _CHECK_SEED)  # after the echo, so it adds no delay


def pairwise_matrix(rows: list[dict], world_size: int, size_bytes: int,
                    threshold: float = 0.5) -> dict:
    """Lay out the bandwidth of every measured (src, dst) at `size_bytes` as an n x n matrix.

    matrix[src][dst] is GB/s, None where not measured (always on the diagonal); a later row for
    the same pair replaces an earlier one. Pairs below `threshold` x the median of the measured
    pairs are flagged, slowest first: a slow link, or a GPU that is slow with every peer.
    No communication.
    """
    matrix: list[list[float | None]] = [[None] * world_size for _ in range(world_size)]
    for r in rows:
        if r["size_bytes"] == size_bytes and r["src"] != r["dst"]:
            matrix[r["src"]][r["dst"]] = float(r["bandwidth_gbps"])
    measured = [(i, j, v) for i, line in enumerate(matrix) for j, v in enumerate(line) if v is not None]
    median = float(statistics.median(v for _, _, v in measured)) if measured else 0.0
    flagged = []
    if median > 0:
        flagged = [dict(src=i, dst=j, gbps=v, ratio_to_median=v / median)
                   for i, j, v in measured if v < threshold * median]
        flagged.sort(key=lambda f: f["ratio_to_median"])
    return {"size_bytes": size_bytes, "matrix": matrix, "median_gbps": median, "flagged": flagged}
