"""The timed op issued straight into NCCL, on the communicator torch's process group already holds.

Why: on 2 x H100 (NVLink) torch.distributed's per-call path (Python dispatch, a Work object,
the cross-stream event record/wait pair around every collective, the watchdog's bookkeeping) cost
an 8 B all_reduce 45 us against nccl-tests' 28 us, sendrecv 91 us against 22, and put an
event-record node beside every collective in a captured CUDA graph (10.7 us per op against
nccl-tests -G 6.2). nccl-tests calls ncclAllReduce & co. on one stream; so does this module: the
same library (the one torch loaded), the same communicator (ProcessGroupNCCL._comm_ptr()), the
op on the caller's current stream (a graph capture's stream while capturing), one ctypes call.
gather, scatter and alltoall use NCCL's own ncclGather/ncclScatter/ncclAlltoAll where the library
has them (2.28+), else grouped ncclSend/ncclRecv as nccl-tests does before 2.28.

`bind` returns None where this cannot run (no CUDA, not NCCL, torch without _comm_ptr, a library
without the symbols, RINGLEADER_NCCL_DIRECT=0): the caller keeps torch's call. The op's order on
the device stays torch's: every torch collective around a timed loop (sync, aligned_start) is
synchronous, so the current stream waits for it before our ops and NCCL sees one order per rank.
"""

from __future__ import annotations

import ctypes
import os
import sys

# ncclDataType_t and ncclRedOp_t (nccl.h; stable since NCCL 2.10, bfloat16 included).
_DTYPES = {"int8": 0, "uint8": 1, "int32": 2, "int64": 4, "float16": 6, "float32": 7,
           "float64": 8, "bfloat16": 9}
_REDUCE = {"sum": 0, "prod": 1, "max": 2, "min": 3, "avg": 4}
_P, _N, _I = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int
_SIGNATURES = {  # name: argument types after (sendbuff, recvbuff, count, datatype)
    "ncclAllReduce": (_I, _P, _P), "ncclReduce": (_I, _I, _P, _P), "ncclBroadcast": (_I, _P, _P),
    "ncclAllGather": (_P, _P), "ncclReduceScatter": (_I, _P, _P), "ncclAlltoAll": (_P, _P),
    "ncclGather": (_I, _P, _P), "ncclScatter": (_I, _P, _P),
}
_NATIVE = {"gather": "ncclGather", "scatter": "ncclScatter", "alltoall": "ncclAlltoAll"}  # NCCL 2.28+
ENV = "RINGLEADER_NCCL_DIRECT"  # "0": time torch.distributed's calls instead (A/B, escape hatch)
_lib = None


def _library():
    """The libnccl torch itself loaded (found in this process's maps), so comm pointers match."""
    global _lib
    if _lib is None:
        path = "libnccl.so.2"
        try:
            with open("/proc/self/maps") as f:
                path = next((ln.split()[-1] for ln in f if "libnccl.so" in ln and "/" in ln), path)
        except OSError:
            pass
        lib = ctypes.CDLL(path)
        for name, rest in _SIGNATURES.items():
            if hasattr(lib, name):
                fn = getattr(lib, name)
                fn.argtypes, fn.restype = (_P, _P, _N, _I, *rest), _I
        for name in ("ncclSend", "ncclRecv"):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = (_P, _N, _I, _I, _P, _P), _I
        lib.ncclGroupStart.restype = lib.ncclGroupEnd.restype = _I
        lib.ncclGetErrorString.restype, lib.ncclGetErrorString.argtypes = ctypes.c_char_p, (_I,)
        _lib = lib
    return _lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise RuntimeError(f"{what}: NCCL error {rc} ({_lib.ncclGetErrorString(rc).decode()})")


def comm_ptr(group, device) -> int:
    """The ncclComm_t of `group` (None: the default group) on `device`; 0 if torch hides it."""
    import torch.distributed as dist

    try:
        backend = (group or dist.group.WORLD)._get_backend(device)
        return int(backend._comm_ptr())
    except (AttributeError, RuntimeError):
        return 0


def bind(op: str, send, recv, *, count: int, dtype: str, reduce_op: str, root: int, rank: int, n: int,
         group, device):
    """One launch of `op` on NCCL directly, or None (then the caller times torch's call).

    send/recv: the tensors torch's call would get (send: this rank's input, or the root's whole
    buffer for scatter; recv: the output, or None where this rank has none). count: elements
    per rank's chunk for the chunked ops and gather/scatter, else the whole buffer's.
    """
    import torch

    if os.environ.get(ENV, "1") == "0" or device.type != "cuda" or dtype not in _DTYPES:
        return None
    comm = comm_ptr(group, device)
    try:
        lib = _library() if comm else None
    except (OSError, AttributeError) as exc:
        print(f"ringleader: NCCL called through torch ({exc})", file=sys.stderr)
        return None
    if lib is None:
        return None
    dt, red = _DTYPES[dtype], _REDUCE.get(reduce_op, 0)
    sp = send.data_ptr() if send is not None else None
    rp = recv.data_ptr() if recv is not None else None
    stream = _current_stream(torch, device)

    def launch(name, *args):
        fn = getattr(lib, name)
        return lambda: _check(fn(*args, comm, stream()), name)
    if op == "all_reduce":
        return launch("ncclAllReduce", sp, sp, count, dt, red)
    if op == "reduce":
        return launch("ncclReduce", sp, sp, count, dt, red, root)
    if op == "broadcast":
        return launch("ncclBroadcast", sp, sp, count, dt, root)
    if op == "all_gather":
        return launch("ncclAllGather", sp, rp, count, dt)
    if op == "reduce_scatter":
        return launch("ncclReduceScatter", sp, rp, count, dt, red)
    name = _NATIVE.get(op, "")
    if name and hasattr(lib, name):
        return launch(name, sp, rp, count, dt) if op == "alltoall" else launch(name, sp, rp, count, dt, root)
    plan = _p2p_plan(op, sp, rp, count, send, rank=rank, n=n, root=root)
    return _grouped(lib, plan, count, dt, comm, stream)


def _p2p_plan(op, sp, rp, count, send, *, rank, n, root) -> list[tuple[str, int, int]]:
    """(ncclSend or ncclRecv, buffer address, peer) for the ops NCCL runs as grouped send/recv."""
    step = count * send.element_size() if send is not None else 0
    if op == "sendrecv":
        return [("ncclSend", sp, (rank + 1) % n), ("ncclRecv", rp, (rank - 1) % n)]
    if op == "alltoall":
        return [p for r in range(n) for p in (("ncclSend", sp + r * step, r), ("ncclRecv", rp + r * step, r))]
    if op == "gather":  # the root receives every chunk, its own included (NCCL copies that one)
        return [("ncclSend", sp, root)] + ([("ncclRecv", rp + r * step, r) for r in range(n)] if rank == root else [])
    if op == "scatter":
        sends = [("ncclSend", sp + r * step, r) for r in range(n)] if rank == root else []
        return sends + [("ncclRecv", rp, root)]
    raise ValueError(f"op: {op!r} has no NCCL launch")


def _current_stream(torch, device):
    """A function giving the device's current stream (cudaStream_t), read at each launch: a graph
    capture swaps it. The raw getter where torch has it: current_stream(device).cuda_stream builds
    a Stream object per call, a few us of an 8 B op whose whole time is ~13 us on NVLink."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is None:
        return lambda: torch.cuda.current_stream(device).cuda_stream
    index = device.index if device.index is not None else torch.cuda.current_device()
    return lambda: raw(index)


def _grouped(lib, plan, count, dt, comm, stream):
    """One ncclGroupStart/End around the plan's sends and receives of `count` elements each."""
    calls = [(getattr(lib, name), ptr, peer, name) for name, ptr, peer in plan]

    def run() -> None:
        s = stream()
        _check(lib.ncclGroupStart(), "ncclGroupStart")
        for fn, ptr, peer, name in calls:
            _check(fn(ptr, count, dt, peer, comm, s), name)
        _check(lib.ncclGroupEnd(), "ncclGroupEnd")
    return run
