"""The measurement core: time one collective at one size (on the default process group, or the
group a Method names), eager or as a replayed CUDA graph, with calibrated iterations.

Runs inside an executor process whose torch.distributed group is already initialised.
Conventions follow nccl-tests (see ringleader/spec.py): size_bytes is the op's largest buffer,
algbw = size / time, busbw = algbw * spec.busbw_factor.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from ringleader import algos as vocab
from ringleader import spec
from worker import calibrate, datacheck, faults
from worker.algos import Method
from worker.distutil import NoCounter, aligned_start, backend_for, percentile, sync, time_loop
from worker.ops import OpSetup, torch_dtype, torch_reduce_op  # noqa: F401 - part of this module's API

_TRAIN_SEED, _CHECK_SEED = 0, 1


@dataclass
class LocalMeasurement:
    mean_us: float  # this rank's mean time per op over the timed loop
    times_us: list[float]  # per iteration (graph mode: per replay, per op), this rank
    wrong: int  # wrong elements on this rank
    iters: int = 0  # ops timed (the same on every rank)
    mode: str = "eager"


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        # Blocks the caching allocator holds but does not use are free to us too. The nested
        # stats, not memory_reserved/allocated: those flatten every counter first (about 160
        # Python calls each; 0.5 ms per size in a warm job's profile on H100s).
        stats = torch.cuda.memory_stats_as_nested_dict(device)

        def current(key: str) -> int:
            return stats.get(key, {}).get("all", {}).get("current", 0)
        return free + current("reserved_bytes") - current("allocated_bytes")
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


FITS_WITHOUT_ASKING = 64 << 20  # bytes a rank's buffers may need before the free memory is read


def check_fits(op: str, size_bytes: int, world_size: int, in_place: bool, device, algo: str = "") -> None:
    """Raise MemoryError, with the numbers, if one rank's buffers for this size cannot fit."""
    device = torch.device(device)
    need = spec.bytes_needed(op, size_bytes, world_size, in_place, algo)
    if need <= FITS_WITHOUT_ASKING:
        # Asking costs more than a small job's op (cudaMemGetInfo and the allocator's stats: 0.8 ms
        # of a warm 8 B job's ~1.2 ms in its executor on H200s, py-spy); a small buffer that still
        # does not fit fails its allocation (torch.OutOfMemoryError), which fails the job naming
        # the rank, only without the numbers this check gives.
        return
    # bytes_needed reserves one largest buffer for the check; ours works in bounded chunks.
    scratch = min(size_bytes, datacheck.CHUNK) * datacheck.SCRATCH_BYTES_PER_ELEM
    need += max(0, scratch - size_bytes)
    free = _free_bytes(device)
    if need > free:
        raise MemoryError(f"{op} of {spec.format_gib(size_bytes)} needs {spec.format_gib(need)} on {device}, "
                          f"{spec.format_gib(free)} free")


# Small eager setups on the default group, kept between jobs of the same shape (a warm group's
# trivial jobs): their buffers and their bound launch (worker/ncclrt.py reads the communicator
# once) are made once. Every job still fills them afresh. Kept only while the group they were
# bound to lives: the executor forgets them when it destroys it (`forget_setups`).
_SETUPS: dict[tuple, OpSetup] = {}
SETUPS_KEPT = 4
SETUP_KEPT_BYTES = 1 << 20  # larger buffers are not held between jobs: another job may need the memory


def _setup(op, dtype, reduce_op, count, size_bytes, *, rank, n, root, in_place, device, method) -> OpSetup:
    if method.graph or method.group is not None or method.symm is not None or size_bytes > SETUP_KEPT_BYTES:
        return OpSetup(op, dtype, reduce_op, count, rank=rank, n=n, root=root, in_place=in_place, device=device,
                       method=method)
    key = (op, dtype, reduce_op, count, rank, n, root, in_place, device, method.algo)
    if (kept := _SETUPS.get(key)) is None:
        kept = OpSetup(op, dtype, reduce_op, count, rank=rank, n=n, root=root, in_place=in_place, device=device,
                       method=method)
        if len(_SETUPS) >= SETUPS_KEPT:
            _SETUPS.pop(next(iter(_SETUPS)))
        _SETUPS[key] = kept
    return kept


# Auto iterations the default group agreed per shape (eager): kept with the setups, and forgotten
# with them; identical on every member (each runs the group's jobs, in the same order).
_ITERS: dict[tuple, int] = {}
ITERS_KEPT = 64


def _fill(setup: OpSetup, one_op: bool) -> None:
    """Fresh inputs: the check's for a one-op measurement (its op is the checked one), unless a
    kept setup holds them already (refill_kept); else the timed loop's."""
    if not (one_op and setup.fresh == _CHECK_SEED):
        setup.fill(_CHECK_SEED if one_op else _TRAIN_SEED)
    setup.fresh = None  # the ops that follow write into the buffers


def refill_kept() -> None:
    """Between jobs, the executor idle: fresh check inputs in every kept setup, so that the next
    one-op job of its shape starts with its op (measure); its output is checked as ever."""
    for setup in _SETUPS.values():
        setup.fill(_CHECK_SEED)


def forget_setups() -> None:
    """The default group is going: what was bound to it, or agreed in it, goes too."""
    _SETUPS.clear()
    _ITERS.clear()


def _plan(setup: OpSetup, method: Method, iters: int, device, counter, group):
    """(unit, ops per unit, units, check, release): what the timed loops call, how often, and
    how the data check runs the op. Auto iters (0) are decided here from a probe."""
    run = setup.run
    if method.graph:
        from worker.graphs import Captured

        captured = Captured(run, calibrate.GRAPH_OPS if iters == spec.AUTO_ITERS else
                            calibrate.graph_plan(iters)[0], device)
        per, timed = captured.ops, captured.timed

        def unit() -> None:
            timed.replay()
            counter.value += per
        if iters == spec.AUTO_ITERS:
            iters = calibrate.iterations(_probe(unit, 1, per, device, group))

        def check() -> None:
            # Done before any eager NCCL call follows (summarize's): NCCL without graph mixing
            # support needs the host to see a replay end first (worker/graphs.py).
            captured.check.replay()
            torch.cuda.synchronize(device)
        return unit, per, calibrate.graph_plan(iters, per)[1], check, captured.release

    def unit() -> None:
        run()
        counter.value += 1
    if iters == spec.AUTO_ITERS:
        iters = calibrate.iterations(_probe(unit, calibrate.PROBE_ITERS, 1, device, group))
    return unit, 1, iters, run, lambda: None


def _plan_kept(setup: OpSetup, method: Method, iters: int, device, counter, group, shape: tuple):
    """_plan, with auto iterations (eager, default group) as the group agreed them for this shape
    before: no probe again. Every member runs the same jobs in the same order, so every rank
    finds the same."""
    kept = iters == spec.AUTO_ITERS and not method.graph and method.group is None and method.symm is None
    plan = _plan(setup, method, _ITERS.get(shape, iters) if kept else iters, device, counter, group)
    if kept and shape not in _ITERS:
        if len(_ITERS) >= ITERS_KEPT:
            _ITERS.pop(next(iter(_ITERS)))
        _ITERS[shape] = plan[2]  # eager: the units are the iterations
    return plan


def _probe(unit, units: int, per: int, device, group) -> float:
    """The slowest rank's time per op over `units` calls of `unit`, as every rank sees it (a
    collective: every rank then computes the same iteration count)."""
    slowest = torch.tensor([_once(unit, units, device, group) / per], dtype=torch.float64, device=device)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX, group=group)
    return float(slowest.item())


def _once(unit, units: int, device, group) -> float:
    """The mean time in us of `units` calls of `unit`, from an aligned start (no distribution)."""
    if device.type != "cuda":
        t0 = time.perf_counter()
        for _ in range(units):
            unit()
        return (time.perf_counter() - t0) * 1e6 / units
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    aligned_start(device, group)
    start.record()
    for _ in range(units):
        unit()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e3 / units


def measure(op: str, dtype: str, reduce_op: str, size_bytes: int, *, iters: int, warmup: int,
            in_place: bool, root: int, device: torch.device, counter=None,
            method: Method = Method()) -> LocalMeasurement:
    """Time the op (after `warmup` untimed runs), then check its data once.

    iters 0 (auto): as many iterations as calibrate.iterations gives for the slowest rank's
    probe time. method.graph: the timed ops are a captured CUDA graph, replayed.
    """
    device = torch.device(device)
    refusal = spec.backend_refusal(backend_for(device), op=op, dtype=dtype, reduce_op=reduce_op,
                                   graph=method.graph, algo=method.algo)
    if refusal:
        raise ValueError(str(refusal))
    if iters < 0:
        raise ValueError("iters: must be at least 1, or 0 for auto")
    group = method.group
    rank, n = dist.get_rank(group), dist.get_world_size(group)
    count = size_bytes // spec.DTYPE_SIZES[dtype]
    if op != "barrier":
        check_fits(op, size_bytes, n, in_place, device, method.algo)
    counter = counter if counter is not None else NoCounter()
    setup = _setup(op, dtype, reduce_op, count, size_bytes, rank=rank, n=n, root=root, in_place=in_place,
                   device=device, method=method)
    # One timed op on fresh inputs and nothing before it (a warm start's trivial job): that op is
    # the check's op too, on the check's inputs. A second op only to check would cost the job a
    # collective and a fill on its critical path, and check nothing the first one did not do.
    timed_is_check = iters == 1 and not warmup and not method.graph and op != "barrier"
    _fill(setup, timed_is_check)
    for _ in range(warmup):
        setup.run()
        counter.value += 1
    # Drain the warm-up and start together (as plain torch and nccl-tests do), so neither the
    # warm-up's tail nor another rank's setup lands in the timed loop. On a GPU with no warm-up
    # there is nothing to drain, and each timed loop starts aligned on the device (aligned_start):
    # a host-side meeting of the ranks would only add a round trip to a small job.
    if warmup or device.type != "cuda":
        sync(device, group)
    shape = (op, dtype, reduce_op, count, root, in_place, device, method.algo)
    unit, per, units, check, release = _plan_kept(setup, method, iters, device, counter, group, shape)
    try:
        # The fault injector (tests only; a no-op otherwise) delays this rank before each timed op.
        mean_us, times = time_loop(unit, units, device, ops_per_unit=per,
                                   before=partial(aligned_start, device, group), arrive=faults.load().before_op)
        # The check: one more op on fresh inputs (another seed), so timed in-place repetition
        # (sums growing, partial results left on non-roots) cannot spoil it.
        wrong = 0
        if op != "barrier":
            if not timed_is_check:
                setup.fill(_CHECK_SEED)
                check()
                counter.value += 1
            if setup.out is not None:
                wrong = datacheck.count_wrong(setup.out, op=op, dtype=dtype, reduce_op=reduce_op,
                                              rank=rank, world_size=n, root=root, count=count,
                                              seed=_CHECK_SEED)
    finally:
        release()
    return LocalMeasurement(mean_us=mean_us, times_us=times, wrong=wrong, iters=units * per,
                            mode="graph" if method.graph else "eager")


def build_result(times_by_rank: list[list[float]], means_by_rank: list[float], wrong: int, *, op, dtype,
                 reduce_op, size_bytes, root, in_place, iters, mode="eager", algo="") -> dict:
    """The SizeResult fields from every rank's measurement (no communication).

    time_us is the slowest rank's mean (a collective ends when its slowest rank does), as
    nccl-tests reports; min/p50/p99 are over samples (iterations; graph mode: replays, per op)
    of the per-sample maximum across ranks. iters: the ops timed.
    """
    per_iter = sorted(max(ts[k] for ts in times_by_rank) for k in range(len(times_by_rank[0])))
    slowest = max(range(len(means_by_rank)), key=means_by_rank.__getitem__)
    time_us = means_by_rank[slowest]
    if op == "barrier":
        size_bytes = 0
    algbw = size_bytes / time_us / 1e3 if time_us > 0 else 0.0
    return dict(
        op=op, dtype=dtype, reduce_op=reduce_op, root=root, in_place=in_place,
        size_bytes=size_bytes, count=size_bytes // spec.DTYPE_SIZES[dtype],
        time_us=time_us, time_min_us=per_iter[0], time_p50_us=percentile(per_iter, 50),
        time_p99_us=percentile(per_iter, 99), time_max_us=per_iter[-1], slowest_rank=slowest,
        slowest_rank_time_us=time_us, algbw_gbps=algbw,
        busbw_gbps=algbw * spec.busbw_factor(op, len(means_by_rank)), wrong=wrong,
        world_size=len(means_by_rank), iters=iters, mode=mode, algo=algo,
    )


def summarize(local: LocalMeasurement, *, op, dtype, reduce_op, size_bytes, root, in_place, device,
              algo: str = "", tally=None) -> dict:
    """Combine every rank's measurement (a collective on the default group: call on every rank).
    algo: what ran ("" names the backend's own). tally: a worker.stragglers.StragglerTally that
    gets every rank's per-iteration times (who reached the ops last)."""
    device = torch.device(device)
    n, rank = dist.get_world_size(), dist.get_rank()
    # One sum carries everything: each rank fills its own row [mean, times..., wrong]. A sum, not
    # a gather: a group pinned to NCCL_ALGO=Tree (an algo flavor) runs all_reduce and nothing else.
    table = torch.zeros(n, len(local.times_us) + 2, dtype=torch.float64, device=device)
    table[rank] = torch.tensor([local.mean_us, *local.times_us, local.wrong], dtype=torch.float64)
    dist.all_reduce(table, op=dist.ReduceOp.SUM)
    rows = table.tolist()
    wrong = int(sum(r[-1] for r in rows))  # exact: counts stay far below 2**53
    if tally is not None:
        tally.add(op, [r[1:-1] for r in rows])
    return build_result([r[1:-1] for r in rows], [r[0] for r in rows], wrong, op=op, dtype=dtype,
                        reduce_op=reduce_op, size_bytes=size_bytes, root=root, in_place=in_place,
                        iters=local.iters, mode=local.mode,
                        algo=vocab.resolved_algo(algo, backend_for(device)))
