"""One op's buffers and its launch, for every op of the vocabulary and every implementation.

OpSetup allocates what one rank needs for one op at one size, says which buffers are inputs
(and whose values they mimic) and which are outputs, and binds `run`: one launch of the op.
"""

from __future__ import annotations

from functools import partial

import torch
import torch.distributed as dist

from ringleader import spec
from worker import datacheck, ncclrt
from worker.algos import Method, symm_op

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


class OpSetup:
    """One op's buffers: `run` issues the op once; `fill` writes fresh inputs; `out` is this
    rank's defined output (None where the op defines none, e.g. non-root ranks of reduce)."""

    def __init__(self, op, dtype, reduce_op, count, *, rank, n, root, in_place, device, method=Method()):
        self.op, self.dtype, self.rank, self.n = op, dtype, rank, n
        self.kind = datacheck.kind_of(op, reduce_op)
        self.direct = False  # whether `run` calls NCCL itself rather than torch.distributed
        self.inputs: list[tuple[torch.Tensor, int]] = []  # (buffer, source rank its values mimic)
        self.outputs: list[torch.Tensor] = []  # set to SENTINEL before the check
        self.out: torch.Tensor | None = None
        self.fresh: int | None = None  # the seed the buffers were last filled with, until the op runs
        self._nccl: tuple | None = None  # (send, recv, count) for ncclrt, set by the binders
        c = count // n if op in spec.CHUNKED_OPS else count
        new = partial(torch.empty, dtype=torch_dtype(dtype), device=device)
        red = torch_reduce_op(reduce_op) if op in spec.REDUCING_OPS else None
        if op in spec.CHUNKED_OPS:
            self._bind_chunked(op, count, c, new, red, rank=rank, n=n, root=root, in_place=in_place, g=method.group)
        else:
            self._bind_whole(op, count, new, red, rank=rank, n=n, root=root, device=device, method=method)
        if self._nccl is not None:  # NCCL straight from Python where it can (worker/ncclrt.py says why)
            send, recv, per = self._nccl
            direct = ncclrt.bind(op, send, recv, count=per, dtype=dtype, reduce_op=reduce_op, root=root,
                                 rank=rank, n=n, group=method.group, device=torch.device(device))
            self.run = direct or self.run
            self.direct = direct is not None

    def _bind_whole(self, op, count, new, red, *, rank, n, root, device, method) -> None:
        """Ops whose buffers are whole (not split in world_size chunks)."""
        g = method.group
        if method.symm is not None:  # symm:* (the spec allows all_reduce, sum only)
            x = method.symm.tensor(count, torch_dtype(self.dtype))
            out = new(count) if method.algo == "symm:one_shot" else x
            self.run = symm_op(method.algo, x, out, method.symm.group_name)
            self._io(x, rank, out=out)
        elif op == "barrier":
            if device.type == "cuda":  # name the device, or NCCL's barrier guesses it (and warns)
                index = torch.cuda.current_device() if device.index is None else device.index
                self.run = partial(dist.barrier, group=g, device_ids=[index])
            else:
                self.run = partial(dist.barrier, group=g)
        elif op in ("all_reduce", "reduce", "broadcast"):
            # torch's APIs for these are in-place only, so they run in place in both modes.
            x = new(count)
            if op == "all_reduce":
                self.run = partial(dist.all_reduce, x, op=red, group=g)
            elif op == "reduce":
                self.run = partial(dist.reduce, x, dst=root, op=red, group=g)
            else:
                self.run = partial(dist.broadcast, x, src=root, group=g)
            self._nccl = (x, x, count)
            src = rank if op != "broadcast" or rank == root else None
            self._io(x, src, out=x if op != "reduce" or rank == root else None)
        elif op == "sendrecv":  # ring: send to the next rank, receive from the previous one
            send, recv = new(count), new(count)
            self.run = _p2p([dist.P2POp(dist.isend, send, (rank + 1) % n, group=g),
                             dist.P2POp(dist.irecv, recv, (rank - 1) % n, group=g)])
            self._nccl = (send, recv, count)
            self._io(send, rank, out=recv)
        else:
            raise ValueError(f"op: unknown op {op!r}")

    def _bind_chunked(self, op, count, c, new, red, *, rank, n, root, in_place, g) -> None:
        """Ops with one buffer of world_size chunks of `c` elements."""
        if op == "all_gather":
            out = new(count)
            inp = out[rank * c:(rank + 1) * c] if in_place else new(c)
            self.run = partial(_all_gather_single, out, inp, group=g)
            self._nccl = (inp, out, c)
            self._io(inp, rank, out=out)
        elif op == "reduce_scatter":
            inp = new(count)
            out = inp[rank * c:(rank + 1) * c] if in_place else new(c)
            self.run = partial(_reduce_scatter_single, out, inp, op=red, group=g)
            self._nccl = (inp, out, c)
            self._io(inp, rank, out=out)
        elif op == "alltoall":
            inp, out = new(count), new(count)
            self.run = partial(dist.all_to_all_single, out, inp, group=g)
            self._nccl = (inp, out, c)
            self._io(inp, rank, out=out)
        else:  # gather, scatter: `whole` is the root's gathered output / scattered input
            whole = new(count) if rank == root else None
            mine = whole[root * c:(root + 1) * c] if whole is not None else None
            local = mine if in_place and rank == root else new(c)  # the input / output chunk
            gather = op == "gather"
            self.run = _rooted(whole, local, mine, c, rank=rank, n=n, root=root, receive=gather, group=g)
            self._nccl = (local, whole, c) if gather else (whole, local, c)
            if gather:
                self._io(local, rank, out=whole)
            else:
                self._io(whole, root, out=local)

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
        self.fresh = seed


def _p2p(ops: list) -> "callable":
    """One grouped launch of point-to-point ops (NCCL: a single ncclGroupStart/End)."""
    def run() -> None:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
    return run


def _rooted(whole, mine_io, root_chunk, c: int, *, rank: int, n: int, root: int, receive: bool, group):
    """gather (receive=True: the root receives chunk s of `whole` from rank s) or scatter (the
    root sends chunk s of `whole` to rank s), as grouped send/recv into one contiguous buffer.

    The root's own chunk is a local copy between `mine_io` (its input for gather, its output for
    scatter) and `root_chunk` (its place in `whole`), issued on the compute stream while the
    grouped transfers run on NCCL's: it overlaps them. torch's gather/scatter copy it first, then
    transfer, which cost 13-15 % at 8 GiB on H200s. In place, the two are the same memory.
    """
    if rank != root:
        op = dist.irecv if not receive else dist.isend
        return _p2p([dist.P2POp(op, mine_io, root, group=group)])
    op = dist.irecv if receive else dist.isend
    ops = [dist.P2POp(op, whole[s * c:(s + 1) * c], s, group=group) for s in range(n) if s != root]
    dst, src = (root_chunk, mine_io) if receive else (mine_io, root_chunk)
    copy = dst.data_ptr() != src.data_ptr()

    def run() -> None:
        works = dist.batch_isend_irecv(ops) if ops else []
        if copy:
            dst.copy_(src)
        for work in works:
            work.wait()
    return run
