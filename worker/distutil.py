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


def sync(device: torch.device, group=None) -> None:
    """A barrier that also drains this rank's device work (bookkeeping: not counted as an op).

    An all_reduce on the device rather than dist.barrier, which on NCCL has to guess the device.
    """
    if device.type == "cuda":
        dist.all_reduce(torch.zeros(1, device=device), group=group)
        torch.cuda.synchronize(device)
    else:
        dist.barrier(group=group)


# Device cycles the stream is held before a timed loop (about 25-50 us): long enough for the
# host to queue the barrier and the first ops behind it, short against a 20 ms loop.
HOLD_CYCLES = 50_000


def aligned_start(device: torch.device, group=None) -> None:
    """Queue, before a timed loop's start event, what makes that event fire on every rank at once.

    Each rank's host reaches its loop at its own time (its sync returned, it built events); had
    the start event been recorded on an idle stream, it would fire at once and the first op would
    then wait for the slowest rank, a skew that lands in the mean. Here the stream is held a
    moment (the host queues the barrier and the first ops meanwhile), then a one-element
    all_reduce completes only when the last rank has reached it: the start event recorded
    behind it fires when every rank is ready, and the first timed op is already queued.
    """
    if device.type != "cuda":
        return
    torch.cuda._sleep(HOLD_CYCLES)
    dist.all_reduce(torch.zeros(1, device=device), group=group)


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list."""
    k = max(1, math.ceil(p / 100 * len(sorted_values)))
    return sorted_values[k - 1]


def time_loop(run, units: int, device: torch.device, *, ops_per_unit: int = 1,
              before=None, arrive=None) -> tuple[float, list[float]]:
    """(mean, per-unit) time per op in us of `units` calls of `run`, each issuing `ops_per_unit`
    ops (one eager op, or one replay of a CUDA graph of several).

    CPU: perf_counter around each call (gloo's blocking calls return when done); the mean is
    theirs. CUDA: the mean from two events around a whole loop (nccl-tests' method), then the
    distribution from a second loop with an event before every unit. Separate loops because
    per-iteration events cost about 10 us per op at small sizes (measured on H200s), which would
    inflate the mean that users compare with nccl-tests; so at small sizes min and p50 can exceed
    the mean. `before` (e.g. `aligned_start`, which every rank must then call) is queued ahead
    of each CUDA loop's first event. `arrive` is called before each unit, outside its timing
    (the fault injector's delay: a rank that reaches each op late).
    """
    before, arrive = before or (lambda: None), arrive or (lambda: None)
    if device.type != "cuda":
        clock, times = time.perf_counter, [0.0] * units
        for k in range(units):
            arrive()
            t0 = clock()
            run()
            times[k] = (clock() - t0) * 1e6 / ops_per_unit
        return sum(times) / units, times
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    before()
    start.record()
    for _ in range(units):
        arrive()
        run()
    end.record()
    end.synchronize()
    mean_us = start.elapsed_time(end) * 1e3 / (units * ops_per_unit)
    if units == 1:  # one unit between two events is already its own per-unit time
        return mean_us, [mean_us]
    events = [torch.cuda.Event(enable_timing=True) for _ in range(units + 1)]
    before()
    for k in range(units):
        arrive()
        events[k].record()
        run()
    events[units].record()
    torch.cuda.synchronize(device)
    return mean_us, [events[k].elapsed_time(events[k + 1]) * 1e3 / ops_per_unit for k in range(units)]

