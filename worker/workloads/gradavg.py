"""Gradient averaging two ways: an all_reduce on the device buffers against staging through host
memory and a gloo all_reduce (what frameworks fall back to without a GPU-aware transport).

Every rank fills grad[i] = rank + 0.001 * i (float32), so the average has the closed form
(n - 1) / 2 + 0.001 * i and both paths are checked against it, never against each other.
"""

from __future__ import annotations

import time

import torch
import torch.distributed as dist

from ringleader import spec
from worker import datacheck
from worker.distutil import NoCounter, backend_for, sync

RTOL = 1e-5


def _native_avg(backend: str) -> bool:
    """Whether `backend` averages float32 itself (NCCL does; torch 2.13's gloo does for floats)."""
    return spec.backend_refusal(backend, op="all_reduce", dtype="float32", reduce_op="avg") is None


def _fill(grad: torch.Tensor, rank: int) -> None:
    for start in range(0, grad.numel(), datacheck.CHUNK):
        stop = min(start + datacheck.CHUNK, grad.numel())
        i = torch.arange(start, stop, device=grad.device, dtype=torch.float64)
        grad[start:stop].copy_(i * 0.001 + rank)


def _errors(grad: torch.Tensor, n: int) -> tuple[bool, float, float]:
    """(all within RTOL, max abs error, max rel error) of `grad` against the closed form."""
    ok, max_abs, max_rel = True, 0.0, 0.0
    for start in range(0, grad.numel(), datacheck.CHUNK):
        stop = min(start + datacheck.CHUNK, grad.numel())
        exp = torch.arange(start, stop, device=grad.device, dtype=torch.float64) * 0.001 + (n - 1) / 2
        err = (grad[start:stop].double() - exp).abs()
        # "not within", so NaN fails; the expected value is 0 only at i = 0 with n = 1, exact there
        ok = ok and not bool((~(err <= RTOL * exp.abs())).any())
        rel = err / exp.abs().clamp_min(torch.finfo(torch.float64).tiny)
        max_abs = max(max_abs, float(err.max()))
        max_rel = max(max_rel, float(rel.max()))
    return ok, max_abs, max_rel


def _host_group_for(device: torch.device, host_group):
    """(group to use for host buffers, group this call created and must destroy, or None)."""
    if host_group is not None:
        return host_group, None
    if backend_for(torch.device("cpu")) == "gloo":  # gloo, or a "cpu:gloo,cuda:nccl" default
        return dist.group.WORLD, None
    created = dist.new_group(backend="gloo")  # collective: every rank gets here
    return created, created


def _both_paths(numel, iters, warmup, device, counter, native: bool, group) -> list[float]:
    """Time and check both paths; the worst of every rank: [device bad, host bad, max abs error,
    max rel error, device us, host us]."""
    rank, n = dist.get_rank(), dist.get_world_size()
    grad = torch.empty(numel, dtype=torch.float32, device=device)
    host = torch.empty(numel, dtype=torch.float32, pin_memory=device.type == "cuda")

    def on_device():
        if native:
            dist.all_reduce(grad, op=dist.ReduceOp.AVG)
        else:
            dist.all_reduce(grad, op=dist.ReduceOp.SUM)
            grad.div_(n)
        counter.value += 1

    def host_staged():
        host.copy_(grad)  # device to host: synchronous, gloo reads the host buffer next
        dist.all_reduce(host, op=dist.ReduceOp.SUM, group=group)
        host.div_(n)
        grad.copy_(host)
        counter.value += 1

    verdicts, times = [], []
    for run in (on_device, host_staged):
        _fill(grad, rank)
        times.append(_timed(run, iters, warmup, device))
        _fill(grad, rank)
        run()
        verdicts.append(_errors(grad, n))
    (device_ok, abs_d, rel_d), (host_ok, abs_h, rel_h) = verdicts
    worst = torch.tensor([float(not device_ok), float(not host_ok), max(abs_d, abs_h),
                          max(rel_d, rel_h), times[0], times[1]], dtype=torch.float64, device=device)
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
    return worst.tolist()


def _timed(run, iters: int, warmup: int, device: torch.device) -> float:
    """Mean wall time per run in us, after `warmup` runs, synchronised with the device."""
    sync(device)
    for _ in range(warmup):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(iters):
        run()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return (time.perf_counter() - t0) * 1e6 / iters


def _validate(numel: int, iters: int, warmup: int) -> None:
    if numel < 1:
        raise ValueError("numel: must be at least 1")
    if iters < 1:
        raise ValueError("iters: must be at least 1")
    if warmup < 0:
        raise ValueError("warmup: must not be negative")


def gradient_average(numel: int, *, iters: int, warmup: int, device, counter=None,
                     host_group=None) -> dict:
    """Average a float32 gradient of `numel` elements across the default group, two ways.

    device path: one all_reduce AVG on the device buffer (SUM then divide where the backend has
    no float AVG). host path: copy to host memory (pinned on GPU), all_reduce SUM over
    `host_group` (a gloo group; by default the default group if that runs gloo for CPU
    tensors, else one created here with dist.new_group(backend="gloo") and destroyed on return:
    pass one to reuse it across calls), divide, copy back.

    Both are timed by wall clock around `iters` runs after `warmup` (device synchronised at
    both ends), so the copies count for the host path and both paths share one clock. The
    timed runs average in place; afterwards each path runs once more on freshly filled data,
    which is checked against the closed form on every rank. Times are the slowest rank's,
    errors the largest on any rank and a path is ok only if it is ok on every rank, so every
    rank returns the same dict. `counter` grows by one per all_reduce of either path.
    """
    _validate(numel, iters, warmup)
    device = torch.device(device)
    counter = counter if counter is not None else NoCounter()
    native = _native_avg(backend_for(device))
    group, created = _host_group_for(device, host_group)
    try:
        device_bad, host_bad, max_abs, max_rel, device_us, host_us = _both_paths(
            numel, iters, warmup, device, counter, native, group)
    finally:
        if created is not None:
            dist.destroy_process_group(created)
    return {
        "numel": numel, "size_bytes": numel * 4, "device_time_us": device_us,
        "host_time_us": host_us, "speedup": host_us / device_us if device_us > 0 else 0.0,
        "device_ok": device_bad == 0, "host_ok": host_bad == 0, "max_rel_error": max_rel,
        "max_abs_error": max_abs, "world_size": dist.get_world_size(), "iters": iters,
    }
