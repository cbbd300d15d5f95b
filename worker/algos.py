"""Implementations beyond the backend's own all_reduce, and the choice between them.

- symm:one_shot, symm:two_shot: torch's symmetric-memory kernels (torch.ops.symm_mem). Every rank
  maps every peer's buffer (one buffer per job, of the largest size; each size runs on a view of
  it): one-shot reads all peers' inputs over NVLink and reduces them in one kernel (out of
  place), two-shot reduce-scatters then all-gathers in place. NVLink multicast stays off.
- nccl:ALGO/PROTO inside an algo sweep: a process group of the job's members created while
  NCCL_ALGO/NCCL_PROTO are set (NCCL reads them when it creates a communicator), destroyed after.
  (A collective job with such an algo runs on a warm group of that flavor instead: executor.py.)
- `choose`: per size, the fastest algo with no wrong element, and the dispatch table.

torch is imported inside functions: the selection logic is tested without it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from functools import partial

from ringleader import algos as vocab

SYMM_WORD = 4  # bytes: the symmetric-memory kernels move whole 32-bit words


@dataclass(frozen=True)
class Method:
    """How an op runs: its implementation, on which process group, timed how."""

    algo: str = ""  # canonical (ringleader.algos); "" the backend's own
    graph: bool = False  # captured into a CUDA graph and replayed
    group: object = None  # the torch process group (None: the default group)
    symm: "SymmBuffer | None" = None  # symm:* algos: the job's symmetric buffer


@contextlib.contextmanager
def comm_env(env: dict[str, str]):
    """Set these environment variables for the block (a communicator created inside reads
    them), then restore what was there."""
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class SymmBuffer:
    """One symmetric allocation of `nbytes`, mapped by every rank of `group` (a collective)."""

    def __init__(self, nbytes: int, device, group=None) -> None:
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        # NVLink multicast can take a shared host's GPUs down; read when the first buffer is made.
        os.environ["TORCH_SYMM_MEM_DISABLE_MULTICAST"] = "1"
        self.group_name = (group or dist.group.WORLD).group_name
        self.raw = symm_mem.empty(max(nbytes, SYMM_WORD), dtype=torch.uint8, device=device)
        symm_mem.rendezvous(self.raw, self.group_name)

    def tensor(self, count: int, dtype):
        """A view of the buffer's first `count` elements of `dtype` (the kernels take views)."""
        nbytes = count * dtype.itemsize
        if nbytes > self.raw.numel() or nbytes % SYMM_WORD:
            raise ValueError(f"algo: symmetric buffer of {self.raw.numel()} B cannot hold {nbytes} B "
                             f"(whole {SYMM_WORD}-byte words)")
        return self.raw[:nbytes].view(dtype)


def symm_op(algo: str, x, out, group_name: str):
    """The op on the symmetric view `x`: one-shot writes `out`, two-shot reduces `x` in place."""
    import torch

    if algo == "symm:one_shot":
        return partial(torch.ops.symm_mem.one_shot_all_reduce_out, x, "sum", group_name, out)
    return partial(torch.ops.symm_mem.two_shot_all_reduce_, x, "sum", group_name)


def symm_unavailable(device) -> str:
    """Why the symmetric-memory algos cannot run on this gang ("" when they can). A collective
    on the default group: every rank gets the same answer."""
    import socket
    import zlib

    import torch
    import torch.distributed as dist

    ok = device.type == "cuda" and hasattr(torch.ops, "symm_mem") and \
        hasattr(torch.ops.symm_mem, "one_shot_all_reduce_out")
    host = zlib.crc32(socket.gethostname().encode())
    facts = torch.tensor([int(ok), host, -host], dtype=torch.int64,
                         device=device if device.type == "cuda" else "cpu")
    dist.all_reduce(facts, op=dist.ReduceOp.MIN)
    if not facts[0].item():
        return "torch symmetric memory needs CUDA devices and torch.ops.symm_mem on every rank"
    if facts[1].item() != -facts[2].item():
        return "symmetric memory maps peers' memory: every rank must be on one host"
    return ""


@contextlib.contextmanager
def variant_group(algo: str, device):
    """A process group of every rank whose NCCL communicator was created with the algo's
    NCCL_ALGO/NCCL_PROTO (a collective: every rank enters in the same order)."""
    import torch
    import torch.distributed as dist

    with comm_env(vocab.flavor_env(vocab.flavor(algo))):
        group = dist.new_group(backend="nccl")
        # The communicator may be created lazily: make it now, while the variables are set.
        dist.all_reduce(torch.zeros(1, device=device), group=group)
        torch.cuda.synchronize(device)
    try:
        yield group
    finally:
        dist.destroy_process_group(group)


@contextlib.contextmanager
def method(algo: str, *, graph: bool, device, max_bytes: int, own_group: bool):
    """The Method for `algo`, with what it needs made for the block: a symmetric buffer for
    symm:*, and with `own_group` (an algo sweep) a variant group for nccl:ALGO/PROTO."""
    if algo in vocab.SYMM_ALGOS:
        yield Method(algo, graph, symm=SymmBuffer(min(max_bytes, vocab.SYMM_MAX_BYTES), device))
    elif own_group and vocab.flavor(algo):
        with variant_group(algo, device) as group:
            yield Method(algo, graph, group=group)
    else:
        yield Method(algo, graph)


def runs_at(algo: str, size_bytes: int) -> bool:
    """Whether an algo sweep measures `algo` at this size (symmetric memory has limits)."""
    if algo in vocab.SYMM_ALGOS:
        return size_bytes <= vocab.SYMM_MAX_BYTES and size_bytes % SYMM_WORD == 0
    return True


def choose(rows: list[dict], default: str) -> tuple[list[dict], list[dict]]:
    """(best, table) from SizeResult-shaped rows (size_bytes, algo, time_us, wrong).

    best: per size, the fastest algo among those with no wrong element (ties: by name), its
    time, and its speedup over `default` (0 where the default was not measured there).
    table: consecutive sizes with the same winner merged into ranges {min_bytes, max_bytes,
    algo}; a message of m bytes takes the first range with m <= max_bytes, and the last range
    (max_bytes 0) takes every larger message.
    """
    by_size: dict[int, list[dict]] = {}
    for r in rows:
        if r["wrong"] == 0 and r["time_us"] > 0:
            by_size.setdefault(r["size_bytes"], []).append(r)
    best = []
    for size in sorted(by_size):
        candidates = by_size[size]
        win = min(candidates, key=lambda r: (r["time_us"], r["algo"]))
        base = next((r["time_us"] for r in candidates if r["algo"] == default), 0.0)
        best.append(dict(size_bytes=size, algo=win["algo"], time_us=win["time_us"],
                         speedup=base / win["time_us"] if base else 0.0))
    table: list[dict] = []
    for b in best:
        if table and table[-1]["algo"] == b["algo"]:
            table[-1]["max_bytes"] = b["size_bytes"]
        else:
            table.append(dict(min_bytes=b["size_bytes"], max_bytes=b["size_bytes"], algo=b["algo"]))
    if table:
        table[-1]["max_bytes"] = 0
    return best, table
