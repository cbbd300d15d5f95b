"""Small torch.distributed helpers shared by the collective sweep and the other workloads."""


from __future__ import annotations

import math
import time

import torch
import torch.distributed as dist


class NoCounter:
    """Stands in for the supervisor's shared counter when the caller passes none."""

    value = 0


def backend_for(device: torch.device) -> str:
    """The default group's backend for tensors on `device` ("nccl" or "gloo")."""
    name = str(dist.get_backend())
    if ":" in name:  # e.g. "cpu:gloo,cuda:nccl"
        name = dict(part.split(":") for part in name.split(",")).get(device.type, name)
    return name


def sync(device: torch.device) -> None:
    """A barrier that also drains this rank's device work (bookkeeping: not counted as an op).

    An all_reduce on the device rather than dist.barrier, which on NCCL has to guess the device.
    """
    if device.type == "cuda":
        dist.all_reduce(torch.zeros(1, device=device))
        torch.cuda.synchronize(device)
    else:
        dist.barrier()


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]


def time_loop(run, iters: int, device: torch.device) -> tuple[float, list[float]]:
    """(mean, per-iteration) time in us of `iters` calls of `run`.

    CPU: perf_counter around each call (gloo's blocking calls return when done); the mean is
    theirs. CUDA: the mean from two events around a whole loop (nccl-tests' method), then the
    distribution from a second loop with an event before every iteration. Separate loops because
    per-iteration events cost about 10 us per op at small sizes (measured on H200s), which would
    inflate the mean that users compare with nccl-tests; so at small sizes min and p50 can exceed
    the mean.
    """
    if device.type != "cuda":
        clock, times = time.perf_counter, [0.0] * iters
        for k in range(iters):
            t0 = clock()
            run()
            times[k] = (clock() - t0) * 1e6
        return sum(times) / iters, times
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        run()
    end.record()
    end.synchronize()
    mean_us = start.elapsed_time(end) * 1e3 / iters
    events = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)]
    for k in range(iters):
        events[k].record()
        run()
    events[iters].record()
    torch.cuda.synchronize(device)
    return mean_us, [events[k].elapsed_time(events[k + 1]) * 1e3 for k in range(iters)]


