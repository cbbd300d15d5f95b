"""What a replayed CUDA graph of 20 all_reduces of 8 B holds and costs, as ringleader captures it.

    torchrun --standalone --nproc-per-node 2 bench/graph_probe.py LABEL OUT.json

Captures 20 ops (RINGLEADER_NCCL_DIRECT picks NCCL direct or torch's call), replays the graph
200 times between two events (time per op), then profiles 20 replays: every GPU activity the
replays ran (kernels, copies, sets) with its count and mean duration, so the time per op splits
into what the device executed and the gaps between. Run it under different NCCL settings (the
environment) to compare. Rank 0 appends one JSON line to OUT.json; invalid (exit 1) if one more replay on
inputs of 1 does not give 2**20 everywhere (20 in-place sums over 2 ranks).
"""

import json
import os
import sys
from collections import defaultdict

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker.ops import OpSetup  # noqa: E402

OPS, REPLAYS = 20, 200


def main() -> None:
    label, out = sys.argv[1], sys.argv[2]
    rank = int(os.environ["RANK"])
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    setup = OpSetup("all_reduce", "float32", "sum", 2, rank=rank, n=2, root=0, in_place=False, device=dev)
    for _ in range(20):
        setup.run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(OPS):
            setup.run()
    for _ in range(10):
        graph.replay()
    torch.cuda.synchronize()
    dist.barrier(device_ids=[dev.index])
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPLAYS):
        graph.replay()
    end.record()
    end.synchronize()
    per_op = start.elapsed_time(end) * 1e3 / (REPLAYS * OPS)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            graph.replay()
        torch.cuda.synchronize()
    acts = defaultdict(list)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            acts[e.name[:60]].append(e.device_time)
    # The graph's data: fresh inputs, the 20 in-place sums of 2 ranks make 2**20 x (1 + 1).
    setup.inputs[0][0].fill_(1.0)
    graph.replay()
    ok = bool((setup.inputs[0][0] == 2.0 ** OPS).all().item())
    if rank == 0:
        row = dict(label=label, direct=setup.direct, per_op_us=per_op, ok=ok,
                   env={k: v for k, v in os.environ.items() if k.startswith("NCCL_")},
                   activities={k: dict(count=len(v) / 20, mean_us=sum(v) / len(v)) for k, v in acts.items()})
        with open(out, "a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{label}: {per_op:.2f} us per op in graph (direct={setup.direct}); per replay of {OPS} ops: "
              + "; ".join(f"{k} x{v['count']:.0f} {v['mean_us']:.2f} us" for k, v in row["activities"].items()),
              flush=True)
    graph.reset()  # with a live captured graph, destroy_process_group hung (2 x H100, NCCL 2.28.9)
    dist.destroy_process_group()
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
