"""The GPU check: per worker, a fixed matrix product (TFLOP/s) and a device-memory copy (GB/s),
each compared with the median of the peers of the same device model.

Conventions, as published figures use them: a product of two n x n matrices is 2 n^3 floating
point operations; a copy of B bytes moves 2 B (every byte read once and written once), so
copy GB/s = 2 B / time / 1e9 (the convention of nvbandwidth's device-local copy and of the
"4.3 TB/s" seen on H200s; half of it is the bytes copied per second). On a GPU the time is
device time between CUDA events, the fastest of the timed calls; on a CPU worker the same
check runs on one CPU core (perf_counter), so it is tested without a GPU. Ranks that share a
device (CPU workers of one host, ranks on one GPU) take turns, so none measures another's load.
"""

from __future__ import annotations

import contextlib

from ringleader import checks
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from worker import faults
from worker.checks import peers
from worker.kinds import Outcome, RunContext

_WARMUP = 2


def resolved(spec: pb.GpuCheckSpec, device_type: str) -> tuple[int, str, int]:
    """(matmul_n, dtype, copy_bytes), the device's defaults where the spec leaves them unset."""
    d = checks.GPU_DEFAULTS["cuda" if device_type == "cuda" else "cpu"]
    return spec.matmul_n or d["matmul_n"], spec.dtype or d["dtype"], spec.copy_bytes or d["copy_bytes"]


def matmul_tflops(n: int, dtype: str, iters: int, device, repeat: int = 1) -> float:
    """TFLOP/s of an n x n product (2 n^3 flops), each timed unit running it `repeat` times
    (the slow_compute fault) but counted once."""
    import torch

    t = getattr(torch, dtype)
    a = torch.randn(n, n, device=device, dtype=t)
    b = torch.randn(n, n, device=device, dtype=t)
    c = torch.empty(n, n, device=device, dtype=t)

    def product():
        for _ in range(repeat):
            torch.matmul(a, b, out=c)

    for _ in range(_WARMUP):
        product()
    return 2 * n ** 3 / (_best_us(product, iters, device) * 1e-6) / 1e12


def copy_gbps(nbytes: int, iters: int, device, repeat: int = 1) -> float:
    """GB/s of a device-to-device copy of `nbytes`, counted as read + write (2 x nbytes)."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def copy():
        for _ in range(repeat):
            dst.copy_(src)

    for _ in range(_WARMUP):
        copy()
    return 2 * nbytes / (_best_us(copy, iters, device) * 1e-6) / 1e9


def _best_us(run, iters: int, device) -> float:
    """The fastest call in us (events around each call on a GPU): what the device can do. A
    slowed device is slow in every call, while a neighbour's burst on a shared host slows only
    some; the best of several is what keeps such bursts from naming a healthy worker."""
    from worker.distutil import time_loop

    _, times = time_loop(run, iters, device)
    return min(times)


@contextlib.contextmanager
def _one_cpu_thread(device):
    """On a CPU worker, measure one core: figures comparable across hosts of any size, and
    immune to the stall of a parallel region whose other thread the OS has descheduled (on a
    busy host, that stall, not the work, is what a multi-threaded product would measure)."""
    import torch

    if device.type != "cpu":
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def run_gpu_check(job: ValidJob, ctx: RunContext) -> Outcome:
    from worker.distutil import sync

    g = job.spec.gpu_check
    n, dtype, nbytes = resolved(g, ctx.device.type)
    fault = faults.load()
    everyone = peers.gather(peers.me(ctx.device))
    turn, turns = peers.turns(everyone, ctx.rank)
    mine = (0.0, 0.0)
    for t in range(turns):
        sync(ctx.device)
        if t == turn:
            fault.before_op()
            with _one_cpu_thread(ctx.device):
                ctx.progress(0, 2, n)
                tflops = matmul_tflops(n, dtype, g.iters, ctx.device, repeat=max(1, round(fault.slow_compute)))
                ctx.progress(1, 2, nbytes)
                mine = (tflops, copy_gbps(nbytes, g.iters, ctx.device, repeat=max(1, round(fault.slow_copy))))
    figures = peers.gather(mine)
    return Outcome(message=gpu_result([p.model for p in everyone], figures, n, dtype, nbytes))


def gpu_result(models: list[str], figures: list[tuple[float, float]], n: int, dtype: str,
               nbytes: int) -> pb.GpuCheckResult:
    """Each rank's figures against the median of its model's (ratio, flag). No communication."""
    out = pb.GpuCheckResult(matmul_n=n, dtype=dtype, copy_bytes=nbytes)
    for rank, (model, (tflops, gbps)) in enumerate(zip(models, figures)):
        same = [f for m, f in zip(models, figures) if m == model]
        med_t, med_c = peers.median([f[0] for f in same]), peers.median([f[1] for f in same])
        t_ratio = tflops / med_t if med_t > 0 else 0.0
        c_ratio = gbps / med_c if med_c > 0 else 0.0
        out.workers.append(pb.GpuFigures(
            rank=rank, device=model, tflops=tflops, copy_gbps=gbps, tflops_ratio=t_ratio, copy_ratio=c_ratio,
            flagged=len(same) > 1 and min(t_ratio, c_ratio) < checks.GPU_FLAG_RATIO))
    return out
