"""The yardstick: the same ops and sizes in plain torch.distributed, as a user would write them.

One process per GPU, NCCL, out-of-place where torch's API allows it. Mode "eager": a loop
timed with two CUDA events around all timed iterations (nccl-tests' method). Mode "graph":
the `iters` ops captured once into a CUDA graph, replayed GRAPH_LAUNCHES times between two
events (nccl-tests -G). Written apart from worker/collectives.py on purpose, so the comparison
does not share code with what it measures. Run by bench/run.py; rank 0 writes the JSON file.
Not a bench by itself: it asserts nothing (an unknown op is an error); bench/run.py checks its
goals against these figures and nccl-tests'.

    torchrun --standalone --nproc-per-node N bench/plain_torch.py OPS SIZES ITERS WARMUP OUT [eager|graph]
"""

from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist

DTYPE = torch.float32
WARM_GPU_ITERS = 200  # 64 MiB all_reduces, about 50 ms on H200s
GRAPH_LAUNCHES = 20


def buffers(op: str, size: int, n: int, dev) -> tuple:
    elems = size // 4
    chunk = elems // n
    if op in ("all_reduce", "reduce", "broadcast"):
        return (torch.ones(elems, dtype=DTYPE, device=dev),)
    if op == "all_gather":
        return torch.ones(chunk, dtype=DTYPE, device=dev), torch.empty(elems, dtype=DTYPE, device=dev)
    if op == "reduce_scatter":
        return torch.ones(elems, dtype=DTYPE, device=dev), torch.empty(chunk, dtype=DTYPE, device=dev)
    if op in ("alltoall", "sendrecv"):
        return torch.ones(elems, dtype=DTYPE, device=dev), torch.empty(elems, dtype=DTYPE, device=dev)
    if op == "gather":
        out = torch.empty(elems, dtype=DTYPE, device=dev)
        return torch.ones(chunk, dtype=DTYPE, device=dev), list(out.chunk(n))
    if op == "scatter":
        src = torch.ones(elems, dtype=DTYPE, device=dev)
        return list(src.chunk(n)), torch.empty(chunk, dtype=DTYPE, device=dev)
    raise ValueError(op)


def make_op(op: str, bufs, rank: int, n: int):
    if op == "all_reduce":
        return lambda: dist.all_reduce(bufs[0])
    if op == "reduce":
        return lambda: dist.reduce(bufs[0], dst=0)
    if op == "broadcast":
        return lambda: dist.broadcast(bufs[0], src=0)
    if op == "all_gather":
        return lambda: dist.all_gather_into_tensor(bufs[1], bufs[0])
    if op == "reduce_scatter":
        return lambda: dist.reduce_scatter_tensor(bufs[1], bufs[0])
    if op == "alltoall":
        return lambda: dist.all_to_all_single(bufs[1], bufs[0])
    if op == "gather":
        return lambda: dist.gather(bufs[0], bufs[1] if rank == 0 else None, dst=0)
    if op == "scatter":
        return lambda: dist.scatter(bufs[1], bufs[0] if rank == 0 else None, src=0)
    if op == "sendrecv":
        peer_to, peer_from = (rank + 1) % n, (rank - 1) % n

        def sendrecv():
            reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, bufs[0], peer_to),
                                           dist.P2POp(dist.irecv, bufs[1], peer_from)])
            for r in reqs:
                r.wait()
        return sendrecv
    raise ValueError(op)


def time_op(fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / iters  # us per op


def time_graph(fn, iters: int, warmup: int) -> float:
    for _ in range(warmup):  # NCCL's communicator and torch's lazy state exist before capture
        fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(iters):
            fn()
    dist.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(GRAPH_LAUNCHES):
        graph.replay()
    end.record()
    end.synchronize()
    graph.reset()
    return start.elapsed_time(end) * 1000 / (iters * GRAPH_LAUNCHES)


def main() -> None:
    ops, sizes, iters, warmup, out = sys.argv[1].split(","), [int(s) for s in sys.argv[2].split(",")], \
        int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    timed = time_graph if sys.argv[6:] == ["graph"] else time_op
    rank, n = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    # Bring the GPUs to their working clocks first (bench/run.py does the same on the ringleader
    # side), so neither side's first sizes run on idle clocks. Not measured.
    warm = make_op("all_reduce", buffers("all_reduce", 64 << 20, n, dev), rank, n)
    for _ in range(WARM_GPU_ITERS):
        warm()
    torch.cuda.synchronize()
    rows = []
    for op in ops:
        for size in sizes:
            size = max(4 * n, size // (4 * n) * (4 * n))  # whole float32 chunks per rank
            fn = make_op(op, buffers(op, size, n, dev), rank, n)
            t = torch.tensor([timed(fn, iters, warmup)], dtype=torch.float64, device=dev)
            dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slowest rank's time, as ringleader reports
            rows.append({"op": op, "size_bytes": size, "time_us": t.item()})
            torch.cuda.empty_cache()
    if rank == 0:
        with open(out, "w") as f:
            json.dump(rows, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
