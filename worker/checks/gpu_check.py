"""The GPU check: per worker, a fixed matrix product (TFLOP/s) and a device-memory copy (GB/s),
each compared with its same-model peers under a noise-aware bound (flags.py).

Conventions, as published figures use them: a product of two n x n matrices is 2 n^3 floating
point operations; a copy of B bytes moves 2 B (every byte read once and written once), so
copy GB/s = 2 B / time / 1e9 (the convention of nvbandwidth's device-local copy and of the
"4.3 TB/s" seen on H200s; half of it is the bytes copied per second).

What a job would get: the clock around a whole loop of `iters` products (the device drained
before and after), not each product's own device time, so a second process sharing the GPU
halves the figure; the best of ROUNDS loops counts (a busy host's burst slows some loops, a
slowed device every one), each loop in another pass over the turns. Every loop's last product must equal the first bit for bit (same
inputs, same kernel), else it counts as wrong. On a CPU worker the same check runs on one CPU
core, so it is tested without a GPU, timed by that thread's CPU clock (_loop_s says why). Ranks
that share a device or a machine's CPUs take turns.

Evidence no rank can forge: every rank's clock times every turn (barrier to barrier), and a
rank's figures claim how long its loops took at least; a claim far below the turn its peers saw
(more than SLACK times the pace of the other turns against their claims, plus ALLOW) is refused. A refused rank alone in its turn is judged on the
figures its turn implies (what its peers saw), else its figures are left out (verdicts: suspect).
"""

from __future__ import annotations

import contextlib
import time

from ringleader import checks
from ringleader.jobspec import ValidJob
from ringleader.v1 import jobs_pb2 as pb
from worker import faults
from worker.checks import flags, peers
from worker.kinds import Outcome, RunContext

_WARMUP = 2
ROUNDS = 3
# A turn may take this much longer than its claims (barriers, its slower loops, noise). On a CPU
# worker a busy machine deschedules a rank for a good part of a second (seen at load 33, 8 ranks
# on 2 cores: a clean rank refused with 0.05 s); an 8x slower rank still exceeds it.
SLACK, ALLOW_S, ALLOW_CPU_S = 4.0, 0.05, 0.5
# A CPU worker's figures carry its host's noise, which a GPU's do not: its core's caches and the
# memory bus are shared with every other process there. Under a test suite's load (a 2-core VM,
# memory-heavy neighbours) a clean rank's best copy read 0.68-0.81 of its peers' median, against
# the usual floor's 0.7. A device at half its peers' speed is below 0.6 when they agree; where
# they spread, the band widens past it under either floor (a halved copy on that VM read up to
# 0.735, named 4 times in 20: docs/results/2026-11-28-local-r21-cpu-check).
FLOOR_CPU = 0.4
# A rank whose figures the first series flags low is measured again, with every rank (a second
# series of passes), and the best of both counts: nobody is failed on one noisy figure. At load
# 10-15 on the namespace bed a clean CPU worker read 0.7 of its peers once in 19 checks; a slowed
# device reads low in both.
SERIES = 2


def resolved(spec: pb.GpuCheckSpec, device_type: str) -> tuple[int, str, int]:
    """(matmul_n, dtype, copy_bytes), the device's defaults where the spec leaves them unset."""
    d = checks.GPU_DEFAULTS["cuda" if device_type == "cuda" else "cpu"]
    return spec.matmul_n or d["matmul_n"], spec.dtype or d["dtype"], spec.copy_bytes or d["copy_bytes"]


def _loop_s(run, iters: int, device) -> float:
    """One loop of `iters` calls, by the clock with the device drained before and after. On a
    CPU worker, by the thread's CPU clock: its device is the core its one thread runs on, and
    other work on the host (a test suite beside the bed: 1 false verdict in 3 default checks at
    load 11 by the wall clock) descheduling that thread is the host's load, not the device's
    speed. A slower core, or more work per call, still shows."""
    clock = time.perf_counter if device.type == "cuda" else time.thread_time
    _drain(device)
    t0 = clock()
    for _ in range(iters):
        run()
    _drain(device)
    return clock() - t0


def _best_loop_s(run, iters: int, device) -> float:
    return min(_loop_s(run, iters, device) for _ in range(ROUNDS))


def _drain(device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def _matmul(n: int, dtype: str, device, repeat: int = 1):
    """(run, check) of an n x n product, warmed up: `run` does one product (`repeat` times: the
    slow_compute fault, counted once); `check` is 1 when the result differs from the first's."""
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
    first = c.clone()
    return product, lambda: int(not torch.equal(c, first))


def _copy(nbytes: int, device, repeat: int = 1):
    """`run` of a device-to-device copy of `nbytes`, warmed up."""
    import torch

    src = torch.ones(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)

    def copy():
        for _ in range(repeat):
            dst.copy_(src)

    for _ in range(_WARMUP):
        copy()
    return copy


def matmul_tflops(n: int, dtype: str, iters: int, device, repeat: int = 1) -> float:
    """TFLOP/s of an n x n product (2 n^3 flops), by the clock around whole loops."""
    product, _ = _matmul(n, dtype, device, repeat)
    return 2 * n ** 3 * iters / _best_loop_s(product, iters, device) / 1e12


def copy_gbps(nbytes: int, iters: int, device, repeat: int = 1) -> float:
    """GB/s of a device-to-device copy of `nbytes`, counted as read + write (2 x nbytes)."""
    return 2 * nbytes * iters / _best_loop_s(_copy(nbytes, device, repeat), iters, device) / 1e9


@contextlib.contextmanager
def _one_cpu_thread(device):
    """On a CPU worker, measure one core: figures comparable across hosts of any size, and
    immune to the stall of a parallel region whose other thread the OS has descheduled."""
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
    g = job.spec.gpu_check
    n, dtype, nbytes = resolved(g, ctx.device.type)
    everyone = peers.gather(peers.me(ctx.device))
    turn, turns = peers.turns(everyone, ctx.rank)
    allow, floor = (ALLOW_S, flags.FLOOR) if ctx.device.type == "cuda" else (ALLOW_CPU_S, FLOOR_CPU)
    reports: list[tuple] = []
    # One thread for the warm-up too: the same kernel (and reduction order) as the timed loops.
    with _one_cpu_thread(ctx.device):
        for series in range(1, SERIES + 1):
            mine, seen = _take_turns(ctx, turn, turns, n, dtype, nbytes, g.iters)
            reports = merged(reports, peers.gather((turn, mine, seen)))
            # Every rank judges the same reports alike, so all agree on whether to measure again.
            result = gpu_result([p.model for p in everyone], reports, n, dtype, nbytes, g.iters, allow, series, floor)
            if not any(w.flagged and not w.wrong for w in result.workers):
                break
    return Outcome(message=result)


def merged(before: list[tuple], reports: list[tuple]) -> list[tuple]:
    """Two series' reports as one: each rank's best figures, wrong loops and turn seconds summed."""
    if not before:
        return reports
    return [(turn, (max(a[0], b[0]), max(a[1], b[1]), a[2] + b[2]), [x + y for x, y in zip(s1, s2)])
            for (turn, a, s1), (_, b, s2) in zip(before, reports)]


def _take_turns(ctx: RunContext, turn: int, turns: int, n: int, dtype: str, nbytes: int, iters: int):
    """(this rank's figures, every turn's seconds by this rank's clock, summed over the passes).
    Ranks set up and warm up in turn; then ROUNDS passes, in each of which every turn's ranks run
    one loop of products and one of copies while every rank's clock times them alone (barrier to
    barrier). A rank's loops are spread over the passes, so that a burst of other work on the
    machine slows one of them, not all of one rank's; its best loop counts."""
    from worker.distutil import sync

    fault = faults.load()
    seen = [0.0] * turns
    for t in range(turns):
        sync(ctx.device)
        if t == turn:
            fault.before_op()
            ctx.progress(t, turns, n)
            product, check = _matmul(n, dtype, ctx.device, repeat=max(1, round(fault.slow_compute)))
            copy = _copy(nbytes, ctx.device, repeat=max(1, round(fault.slow_copy)))
    best_p, best_c, wrong = float("inf"), float("inf"), 0
    for _ in range(ROUNDS):
        for t in range(turns):
            sync(ctx.device)
            t0 = time.perf_counter()
            if t == turn:
                best_p = min(best_p, _loop_s(product, iters, ctx.device))
                wrong += check()
                best_c = min(best_c, _loop_s(copy, iters, ctx.device))
            sync(ctx.device)
            seen[t] += time.perf_counter() - t0
    tflops, gbps = 2 * n ** 3 * iters / best_p / 1e12, 2 * nbytes * iters / best_c / 1e9
    seen = [s + (fault.stretch_turns_s if t != turn else 0.0) for t, s in enumerate(seen)]  # the rogue's account
    return (tflops * fault.inflate_figures, gbps * fault.inflate_figures, wrong), seen


def claimed_s(tflops: float, gbps: float, n: int, nbytes: int, iters: int, series: int = 1) -> float:
    """The least time a rank's timed loops took, if its figures are true (ROUNDS loops of each
    in each series)."""
    if tflops <= 0 or gbps <= 0:
        return 0.0
    return series * ROUNDS * iters * (2 * n ** 3 / (tflops * 1e12) + 2 * nbytes / (gbps * 1e9))


def gpu_result(models: list[str], reports: list[tuple], n: int, dtype: str, nbytes: int,
               iters: int, allow_s: float = ALLOW_S, series: int = 1, floor: float = flags.FLOOR) -> pb.GpuCheckResult:
    """Each rank's figures (its reports: (turn, (tflops, copy GB/s, wrong), turn seconds seen))
    checked against the turns every rank's clock saw, then against its same-model peers under
    the noise-aware bound. No communication."""
    turn_of = [t for t, _, _ in reports]
    # A rank's account of the turns counts only as one voice of the median (a short one: none).
    witnessed = [peers.median([seen[t] for _, _, seen in reports if len(seen) > t]) for t in range(max(turn_of) + 1)]
    claims = [claimed_s(*figures[:2], n, nbytes, iters, series) for _, figures, _ in reports]
    rows = []
    for rank, (turn, (tflops, gbps, wrong), _) in enumerate(reports):
        claim = claims[rank]
        mates = [r for r, t in enumerate(turn_of) if t == turn]
        # How much longer than their claims the other turns ran (at least 1): a busy host's
        # load stretches every turn, not one rank's, and a CPU worker's claims are CPU time.
        pace = max(1.0, peers.median([witnessed[t] / claims[r] for r, t in enumerate(turn_of)
                                      if t != turn and claims[r] > 0]))
        slowest = max(claims[r] for r in mates)
        unexplained = witnessed[turn] > SLACK * pace * slowest + allow_s  # far longer than any claim
        refused = unexplained and witnessed[turn] > SLACK * pace * claim + allow_s
        if refused and len(mates) == 1 and witnessed[turn] > 0:
            # Alone in its turn: what its peers saw bounds what it did (the whole turn as its
            # loops, at the pace the other turns ran).
            scale = min(1.0, pace * claim / witnessed[turn])
            tflops, gbps = tflops * scale, gbps * scale
        rows.append(dict(rank=rank, device=models[rank], tflops=tflops, copy_gbps=gbps, wrong=wrong,
                         witnessed_s=witnessed[turn], claimed_s=claim, refused=refused,
                         judged=not refused or len(mates) == 1))
    out = pb.GpuCheckResult(matmul_n=n, dtype=dtype, copy_bytes=nbytes, series=series)
    for row in rows:
        same = [x for x in rows if x["device"] == row["device"] and x["judged"]]
        med_t, med_c = peers.median([x["tflops"] for x in same]), peers.median([x["copy_gbps"] for x in same])
        low_t, low_c = (flags.bound([x[k] for x in same], floor) for k in ("tflops", "copy_gbps"))
        fields = {k: v for k, v in row.items() if k != "judged"}
        low = row["tflops"] < low_t or row["copy_gbps"] < low_c
        out.workers.append(pb.GpuFigures(
            **fields, tflops_ratio=row["tflops"] / med_t if med_t > 0 else 0.0,
            copy_ratio=row["copy_gbps"] / med_c if med_c > 0 else 0.0, flag_tflops=low_t, flag_copy_gbps=low_c,
            flagged=row["judged"] and (row["wrong"] > 0 or (len(same) > 1 and low))))
    return out
