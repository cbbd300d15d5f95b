"""The link check's ping-pong, timed at both ends (worker/workloads/p2p.py's transfers and byte
checks): the initiator times each round trip from its send to the return; the echo times the
interval between successive returns, which is the same round trip seen from the other end. Each
end reports its own fastest round trip, halved (one-way, osu_latency's convention), its total
for the timed round trips (the initiator: the sum of its round trips; the echo: from the
warm-up's last return to the last timed one; the same round trips, so the two totals agree
within 2x plus 0.5 ms where the fastest ones may not), and the bytes it found wrong on one more
round trip of fresh data. Blocking transfers.

Each link's round trips are bounded in time (`box_s`): the initiator alone decides, and tells the
echo in the last byte of what it sends (a warm-up or a timed round trip, whether it is the
last, and whether the byte check follows), so both ends stop on the same round trip however slow
the link. A round trip that would end past the box (the last one's time from now) is the last of
its kind: the warm-up ends after one round trip, the timed ones after MIN_TIMED: a pass over a
link at 50 Mbit/s takes four round trips, not `warmup + iters` of them. The count of timed round
trips is reported; a link cut short by its box is slow by that fact (its figure is what it
reached). The byte check can be left out (`check`): the passes over flagged links re-time links
whose bytes the first pass checked."""

from __future__ import annotations

import time

_TIMED_SEED, _CHECK_SEED = 0, 1
_SENTINEL = 253
# The last byte of a round trip's data: bit 0 a timed round trip (else warm-up), bit 1 the last,
# bit 2 (on the last) no byte check after it.
_TIMED, _LAST, _NO_CHECK = 1, 2, 4
# Timed round trips a link makes at least, past its box: two give the echo an interval to time
# without a warm-up, and a rank that waited for a CPU on one a second chance (one after a warm-up
# was enough for the interval, and beside a test suite at load 25 clean links read 0.02-0.09 of
# their median).
MIN_TIMED = 2


def _done(device) -> None:
    """Wait for the device (a CUDA transfer returns when queued; the clock must see it land)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _phase(warm: int, timed: int, warmup: int, iters: int, over: bool) -> int:
    """The next round trip's marker after `warm` warm-up and `timed` timed ones; `over`: past the box."""
    if warm < warmup and not (over and warm >= 1):
        return _LAST if warm + 1 >= warmup and iters < 1 else 0
    last = timed + 1 >= iters or (over and timed + 1 >= MIN_TIMED)
    return _TIMED | (_LAST if last else 0)


def initiate(dst: int, size: int, iters: int, warmup: int, device, counter,
             box_s: float = float("inf"), check: bool = True) -> tuple[float, float, int, int]:
    """(fastest one-way us, us of the timed round trips, bytes wrong, timed round trips) of at most
    `warmup + iters` round trips to `dst`, fewer past `box_s` seconds; the bytes checked on one
    more round trip of fresh data unless `check` is False (0 wrong then)."""
    import torch
    import torch.distributed as dist

    from worker.workloads.p2p import _count_wrong, _fill

    send = torch.empty(size, dtype=torch.uint8, device=device)
    recv = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(send, _TIMED_SEED)
    best, total = float("inf"), 0.0
    warm = timed = 0
    start = time.perf_counter()
    took = 0.0  # the last round trip's seconds: the next one is expected to take as long
    while True:
        t0 = time.perf_counter()
        phase = _phase(warm, timed, warmup, iters, t0 - start + took >= box_s)
        if phase & _LAST and not check:
            phase |= _NO_CHECK
        send[-1] = phase
        dist.send(send, dst)
        dist.recv(recv, dst)
        _done(device)
        counter.value += 2
        took = time.perf_counter() - t0
        if phase & _TIMED:
            timed += 1
            best = min(best, took)
            total += took
        else:
            warm += 1
        if phase & _LAST:
            break
    wrong = 0
    if check:
        _fill(send, _CHECK_SEED)
        recv.fill_(_SENTINEL)
        dist.send(send, dst)
        dist.recv(recv, dst)
        counter.value += 2
        wrong = _count_wrong(recv, _CHECK_SEED)
    return (best * 1e6 / 2 if timed else 0.0), total * 1e6, wrong, timed


def echo(src: int, size: int, device, counter) -> tuple[float, float, int, int]:
    """(fastest one-way us between successive returns, us from the warm-up's last return to the
    last timed one, bytes wrong, timed round trips) of the echo's side: as many round trips as
    the initiator's markers say."""
    import torch
    import torch.distributed as dist

    from worker.workloads.p2p import _count_wrong, _fill

    buf = torch.empty(size, dtype=torch.uint8, device=device)
    _fill(buf, _TIMED_SEED)  # overwritten by the first receive; no garbage sent
    best, last = float("inf"), time.perf_counter()
    start = last  # with no warm-up, the first timed round trip's wait counts in the total
    returned = timed = 0
    while True:
        dist.recv(buf, src)
        phase = int(buf[-1].item())
        dist.send(buf, src)
        _done(device)
        now = time.perf_counter()
        if phase & _TIMED:
            timed += 1
            if returned:  # the return before starts the first timed interval
                best = min(best, now - last)
        else:
            start = now
        returned += 1
        last = now
        counter.value += 2
        if phase & _LAST:
            break
    wrong = 0
    if not phase & _NO_CHECK:
        buf.fill_(_SENTINEL)
        dist.recv(buf, src)
        dist.send(buf, src)
        counter.value += 2
        wrong = _count_wrong(buf, _CHECK_SEED)  # counted after the echo, so it adds no delay
    # 0 us: no interval timed (one round trip).
    return (best * 1e6 / 2 if best < float("inf") else 0.0), (last - start) * 1e6, wrong, timed
