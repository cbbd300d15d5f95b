"""The measurement core: time one collective at one size on the default process group.

Runs inside an executor process whose torch.distributed group is already initialised.
Conventions follow nccl-tests (see ringleader/spec.py): size_bytes is the op's largest buffer,
algbw = size / time, busbw = algbw * spec.busbw_factor.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import partial

import torch
import torch.distributed as dist

from ringleader import spec
from worker import datacheck
from worker.distutil import NoCounter, backend_for, percentile, sync, time_loop

_DTYPES = {
    "float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
    "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8,
    "int32": torch.int32, "int64": torch.int64,
}
_REDUCE_OPS = {
    "sum": dist.ReduceOp.SUM, "prod": dist.ReduceOp.PRODUCT, "min": dist.ReduceOp.MIN,
    "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG,
}
# torch 2.13 renamed the tensor forms (the old names warn); keep the old ones for torch < 2.13.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor

_TRAIN_SEED, _CHECK_SEED = 0, 1


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name]
    except KeyError:
        raise ValueError(f"dtype: unknown dtype {name!r}") from None


def torch_reduce_op(name: str) -> dist.ReduceOp:
    try:
        return _REDUCE_OPS[name]
    except KeyError:
        raise ValueError(f"reduce_op: unknown reduce op {name!r}") from None


@dataclass
class LocalMeasurement:
    mean_us: float  # this rank's mean time per op over the timed loop
    times_us: list[float]  # per iteration, this rank (the distribution)
    wrong: int  # wrong elements on this rank


def _free_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        # Blocks the caching allocator holds but does not use are free to us too.
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_fits(op: str, size_bytes: int, world_size: int, in_place: bool, device) -> None:
    """Raise MemoryError, with the numbers, if one rank's buffers for this size cannot fit."""
    device = torch.device(device)
    need = spec.bytes_needed(op, size_bytes, world_size, in_place)
    if need == 0:
        return
    # bytes_needed reserves one largest buffer for the check; ours works in bounded chunks.
    scratch = min(size_bytes, datacheck.CHUNK) * datacheck.SCRATCH_BYTES_PER_ELEM
    need += max(0, scratch - size_bytes)
    free = _free_bytes(device)
    if need > free:
        raise MemoryError(f"{op} of {spec.format_gib(size_bytes)} needs {spec.format_gib(need)} on {device}, "
                          f"{spec.format_gib(free)} free")


class _Setup:
    """One op's buffers: `run` issues the op once; `fill` writes fresh inputs; `out` is this
    rank's defined output (None where the op defines none, e.g. non-root ranks of reduce)."""

    def __init__(self, op, dtype, reduce_op, count, *, rank, n, root, in_place, device):
        self.op, self.dtype, self.rank, self.n = op, dtype, rank, n
        self.kind = datacheck.kind_of(op, reduce_op)
        self.inputs: list[tuple[torch.Tensor, int]] = []  # (buffer, source rank its values mimic)
        self.outputs: list[torch.Tensor] = []  # set to SENTINEL before the check
        self.out: torch.Tensor | None = None
        c = count // n if op in spec.CHUNKED_OPS else count
        new = partial(torch.empty, dtype=torch_dtype(dtype), device=device)
        red = torch_reduce_op(reduce_op) if op in spec.REDUCING_OPS else None
        if op == "barrier":
            if device.type == "cuda":  # name the device, or NCCL's barrier guesses it (and warns)
                index = torch.cuda.current_device() if device.index is None else device.index
                self.run = partial(dist.barrier, device_ids=[index])
            else:
                self.run = dist.barrier
        elif op in ("all_reduce", "reduce", "broadcast"):
            # torch's APIs for these are in-place only, so they run in place in both modes.
            x = new(count)
            if op == "all_reduce":
                self.run = partial(dist.all_reduce, x, op=red)
            elif op == "reduce":
                self.run = partial(dist.reduce, x, dst=root, op=red)
            else:
                self.run = partial(dist.broadcast, x, src=root)
            src = rank if op != "broadcast" or rank == root else None
            self._io(x, src, out=x if op != "reduce" or rank == root else None)
        elif op == "all_gather":
            out = new(count)
            inp = out[rank * c:(rank + 1) * c] if in_place else new(c)
            self.run = partial(_all_gather_single, out, inp)
            self._io(inp, rank, out=out)
        elif op == "reduce_scatter":
            inp = new(count)
            out = inp[rank * c:(rank + 1) * c] if in_place else new(c)
            self.run = partial(_reduce_scatter_single, out, inp, op=red)
            self._io(inp, rank, out=out)
        elif op == "alltoall":
            inp, out = new(count), new(count)
            self.run = partial(dist.all_to_all_single, out, inp)
            self._io(inp, rank, out=out)
        elif op == "gather":
            out = new(count) if rank == root else None
            chunks = list(out.chunk(n)) if out is not None else None
            inp = chunks[root] if in_place and rank == root else new(c)
            self.run = partial(dist.gather, inp, chunks, dst=root)
            self._io(inp, rank, out=out)
        elif op == "scatter":
            inp = new(count) if rank == root else None
            chunks = list(inp.chunk(n)) if inp is not None else None
            out = chunks[root] if in_place and rank == root else new(c)
            self.run = partial(dist.scatter, out, chunks, src=root)
            self._io(inp, root, out=out)
        elif op == "sendrecv":  # ring: send to the next rank, receive from the previous one
            send, recv = new(count), new(count)
            p2p = [dist.P2POp(dist.isend, send, (rank + 1) % n),
                   dist.P2POp(dist.irecv, recv, (rank - 1) % n)]
            self.run = lambda: [w.wait() for w in dist.batch_isend_irecv(p2p)]
            self._io(send, rank, out=recv)
        else:
            raise ValueError(f"op: unknown op {op!r}")

    def _io(self, inp, src, *, out):
        if inp is not None and src is not None:
            self.inputs.append((inp, src))
        if out is not None:
            self.outputs.append(out)
        self.out = out

    def fill(self, seed: int) -> None:
        # Outputs first: in-place inputs are views into them and must win.
        for out in self.outputs:
            out.fill_(datacheck.SENTINEL)
        for buf, src in self.inputs:
            datacheck.fill(buf, kind=self.kind, dtype=self.dtype, src=src, n=self.n, seed=seed)


def measure(op: str, dtype: str, reduce_op: str, size_bytes: int, *, iters: int, warmup: int,
            in_place: bool, root: int, device: torch.device, counter=None) -> LocalMeasurement:
    """Time `iters` runs of the op (after `warmup` untimed ones), then check its data once."""
    device = torch.device(device)
    refusal = spec.backend_refusal(backend_for(device), op=op, dtype=dtype, reduce_op=reduce_op)
    if refusal:
        raise ValueError(str(refusal))
    if iters < 1:
        raise ValueError("iters: must be at least 1")
    rank, n = dist.get_rank(), dist.get_world_size()
    count = size_bytes // spec.DTYPE_SIZES[dtype]
    if op != "barrier":
        check_fits(op, size_bytes, n, in_place, device)
    counter = counter if counter is not None else NoCounter()
    setup = _Setup(op, dtype, reduce_op, count, rank=rank, n=n, root=root, in_place=in_place,
                   device=device)
    setup.fill(_TRAIN_SEED)
    run = setup.run

    for _ in range(warmup):
        run()
        counter.value += 1
    # Drain the warm-up and start together (as plain torch and nccl-tests do), so neither the
    # warm-up's tail nor another rank's setup lands in the timed loop.
    sync(device)
    def counted() -> None:
        run()
        counter.value += 1

    mean_us, times = time_loop(counted, iters, device)

    # The check: one more op on fresh inputs (another seed), so timed in-place repetition
    # (sums growing, partial results left on non-roots) cannot spoil it.
    wrong = 0
    if op != "barrier":
        setup.fill(_CHECK_SEED)
        run()
        counter.value += 1
        if setup.out is not None:
            wrong = datacheck.count_wrong(setup.out, op=op, dtype=dtype, reduce_op=reduce_op,
                                          rank=rank, world_size=n, root=root, count=count,
                                          seed=_CHECK_SEED)
    return LocalMeasurement(mean_us=mean_us, times_us=times, wrong=wrong)


def build_result(times_by_rank: list[list[float]], means_by_rank: list[float], wrong: int, *, op, dtype,
                 reduce_op, size_bytes, root, in_place, iters) -> dict:
    """The SizeResult fields from every rank's measurement (no communication).

    time_us is the slowest rank's mean (a collective ends when its slowest rank does), as
    nccl-tests reports; min/p50/p99 are over iterations of the per-iteration maximum across ranks.
    """
    per_iter = sorted(max(ts[k] for ts in times_by_rank) for k in range(iters))
    slowest = max(range(len(means_by_rank)), key=means_by_rank.__getitem__)
    time_us = means_by_rank[slowest]
    if op == "barrier":
        size_bytes = 0
    algbw = size_bytes / time_us / 1e3 if time_us > 0 else 0.0
    return dict(
        op=op, dtype=dtype, reduce_op=reduce_op, root=root, in_place=in_place,
        size_bytes=size_bytes, count=size_bytes // spec.DTYPE_SIZES[dtype],
        time_us=time_us, time_min_us=per_iter[0], time_p50_us=percentile(per_iter, 50),
        time_p99_us=percentile(per_iter, 99), slowest_rank=slowest,
        slowest_rank_time_us=time_us, algbw_gbps=algbw,
        busbw_gbps=algbw * spec.busbw_factor(op, len(means_by_rank)), wrong=wrong,
        world_size=len(means_by_rank), iters=iters,
    )


def summarize(local: LocalMeasurement, *, op, dtype, reduce_op, size_bytes, root, in_place, iters,
              device) -> dict:
    """Combine every rank's measurement (a collective: call on every rank)."""
    device = torch.device(device)
    n = dist.get_world_size()
    # One gather carries both: [mean, times...] per rank.
    mine = torch.tensor([local.mean_us, *local.times_us], dtype=torch.float64, device=device)
    everyone = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(everyone, mine)
    wrong = torch.tensor([local.wrong], dtype=torch.int64, device=device)
    dist.all_reduce(wrong, op=dist.ReduceOp.SUM)
    rows = [t.tolist() for t in everyone]
    return build_result([r[1:] for r in rows], [r[0] for r in rows], int(wrong.item()), op=op, dtype=dtype,
                        reduce_op=reduce_op, size_bytes=size_bytes, root=root, in_place=in_place,
                        iters=iters)
