"""The link check's ping-pong, timed at both ends (worker/workloads/p2p.py's transfers and byte
checks): the initiator times each round trip from its send to the return; the echo times the
interval between successive returns, which is the same round trip seen from the other end. Each
end reports its own fastest round trip, halved (one-way, osu_latency's convention), its total
for the timed round trips (the initiator: the sum of its round trips; the echo: from the
warm-up's last return to the last timed one; the same round trips, so the two totals agree
within 2x plus 0.5 ms where the fastest ones may not), and the bytes it found wrong on one more
round trip of fresh data. Blocking transfers."""

from __future__ import annotations

import time

_TIMED_SEED, _CHECK_SEED = 0, 1
_SENTINEL = 253


def _done(device) -> None:
    """Wait for the device (a CUDA transfer returns when queued; the clock must see it land)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def initiate(dst: int, size: int, iters: int, warmup: int, device, counter) -> tuple[float, float, int]:
    """(fastest one-way us, us of the timed round trips, bytes wrong) of `iters` round trips to `dst`."""
    import torch
    import torch.distributed as dist

    from worker.workloads.p2p import _count_wrong, _fill

    send = torch.empty(size, dtype=torch.uint8, device=device)
    recv = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(send, _TIMED_SEED)
    best, total = float("inf"), 0.0
    for i in range(warmup + iters):
        t0 = time.perf_counter()
        dist.send(send, dst)
        dist.recv(recv, dst)
        _done(device)
        if i >= warmup:
            best = min(best, time.perf_counter() - t0)
            total += time.perf_counter() - t0
        counter.value += 2
    _fill(send, _CHECK_SEED)
    recv.fill_(_SENTINEL)
    dist.send(send, dst)
    dist.recv(recv, dst)
    counter.value += 2
    return best * 1e6 / 2, total * 1e6, _count_wrong(recv, _CHECK_SEED)


def echo(src: int, size: int, iters: int, warmup: int, device, counter) -> tuple[float, float, int]:
    """(fastest one-way us between successive returns, us from the warm-up's last return to the
    last timed one, bytes wrong) of the echo's side."""
    import torch
    import torch.distributed as dist

    from worker.workloads.p2p import _count_wrong, _fill

    buf = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(buf, _TIMED_SEED)  # overwritten by the first receive; no garbage sent
    best, last = float("inf"), time.perf_counter()
    start = last  # with no warm-up, the first timed round trip's wait counts in the total
    for i in range(warmup + iters):
        dist.recv(buf, src)
        dist.send(buf, src)
        _done(device)
        now = time.perf_counter()
        if i >= max(warmup, 1):  # the return before starts the first timed interval
            best = min(best, now - last)
        if i == warmup - 1:
            start = now
        last = now
        counter.value += 2
    buf.fill_(_SENTINEL)
    dist.recv(buf, src)
    dist.send(buf, src)
    counter.value += 2
    # Counted after the echo, so it adds no delay; 0 us: no interval timed (one round trip).
    return (best * 1e6 / 2 if best < float("inf") else 0.0), (last - start) * 1e6, _count_wrong(buf, _CHECK_SEED)
