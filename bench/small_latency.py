"""Where a small op's time goes: torch.distributed's call against NCCL called directly (worker/ncclrt.py),
eager and as a replayed CUDA graph, with the profiler's and the graph's own evidence.

    torchrun --standalone --nproc-per-node 2 bench/small_latency.py OUT_DIR [SIZES]

For each op and size (default 8 B; gather/scatter also 16 MiB): collectives.measure through torch
(RINGLEADER_NCCL_DIRECT=0) and direct, eager and graph, fixed iterations. Rank 0 writes
OUT_DIR/small_latency.json and prints a table; OUT_DIR/profile-*.txt holds the torch profiler's
table for 50 eager 8 B all_reduces each way, OUT_DIR/graph-*.dot the captured graph of 20 ops
(count its nodes: kernels against event records and memsets). The run is invalid (exit 1) if any
row has a wrong element or the direct path was not taken where asked.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker import collectives, ncclrt  # noqa: E402
from worker.algos import Method  # noqa: E402
from worker.ops import OpSetup  # noqa: E402

OPS = ("all_reduce", "broadcast", "reduce", "sendrecv", "alltoall", "gather", "scatter")


def _measure(op, size, direct: bool, graph: bool, dev):
    os.environ[ncclrt.ENV] = "1" if direct else "0"
    iters = 400 if size <= 1 << 16 else 40
    m = collectives.measure(op, "float32", "sum", size, iters=iters, warmup=20, in_place=False, root=0,
                            device=dev, method=Method(graph=graph))
    return dict(op=op, size=size, path="direct" if direct else "torch", mode=m.mode, mean_us=m.mean_us,
                p50_us=sorted(m.times_us)[len(m.times_us) // 2], wrong=m.wrong, iters=m.iters)


def _profile(dev, out, direct: bool) -> None:
    os.environ[ncclrt.ENV] = "1" if direct else "0"
    setup = OpSetup("all_reduce", "float32", "sum", 2, rank=dist.get_rank(), n=dist.get_world_size(), root=0,
                    in_place=False, device=dev)
    assert setup.direct == direct, "ncclrt did not bind" if direct else "ncclrt bound though disabled"
    for _ in range(20):
        setup.run()
    torch.cuda.synchronize()
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(50):
            setup.run()
        torch.cuda.synchronize()
    name = "direct" if direct else "torch"
    if dist.get_rank() == 0:
        with open(os.path.join(out, f"profile-{name}.txt"), "w") as f:
            f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))
    graph = torch.cuda.CUDAGraph()
    graph.enable_debug_mode()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(20):
            setup.run()
    if dist.get_rank() == 0:
        graph.debug_dump(os.path.join(out, f"graph-{name}.dot"))
    graph.reset()


def main() -> None:
    out = sys.argv[1]
    sizes = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else [8]
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    os.makedirs(out, exist_ok=True)
    rows = []
    for op in OPS:
        for size in sizes + ([16 << 20] if op in ("gather", "scatter") else []):
            for graph in (False, True):
                for direct in (False, True):
                    rows.append(dict(_measure(op, size, direct, graph, dev), graph=graph))
    _profile(dev, out, False)
    _profile(dev, out, True)
    if rank == 0:
        with open(os.path.join(out, "small_latency.json"), "w") as f:
            json.dump(rows, f, indent=1)
        print("| op | size | mode | torch us | direct us | torch/direct | wrong |\n|---|---|---|---|---|---|---|")
        for a, b in zip(rows[::2], rows[1::2]):
            print(f"| {a['op']} | {a['size']} | {a['mode']} | {a['mean_us']:.2f} | {b['mean_us']:.2f} | "
                  f"{a['mean_us'] / b['mean_us']:.2f} | {a['wrong'] + b['wrong']} |", flush=True)
    bad = sum(r["wrong"] for r in rows)
    dist.destroy_process_group()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
