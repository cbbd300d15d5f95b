"""Eager 8 B all_reduce through collectives.measure outside the service (issue 28): with and without
warm-up, the supervisor's op counter, fixed (637) or calibrated iterations, three times each; the
slowest rank's mean per op. Run once with NCCL's default and once with NCCL_GRAPH_MIXING_SUPPORT=0
(the executors' setting) to tell the service's eager time from NCCL's. The run is invalid (exit 1)
unless the op goes to NCCL directly (worker/ncclrt.py, as in the service) and no element is wrong.

    torchrun --standalone --nproc-per-node 2 bench/eager_probe.py
"""

import multiprocessing as mp
import os
import sys

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker import collectives  # noqa: E402
from worker.algos import Method  # noqa: E402
from worker.ops import OpSetup  # noqa: E402


def main() -> None:
    rank = int(os.environ["LOCAL_RANK"])
    dev = torch.device("cuda", rank)
    torch.cuda.set_device(dev)
    dist.init_process_group("nccl", device_id=dev)
    counter = mp.Value("q", 0, lock=False)
    direct = OpSetup("all_reduce", "float32", "sum", 2, rank=rank, n=2, root=0, in_place=False, device=dev).direct
    rows: dict[tuple, list] = {}
    wrong = 0
    for _ in range(3):
        for warmup in (0, 20):
            for iters in (637, 0):
                for cnt in (None, counter):
                    m = collectives.measure("all_reduce", "float32", "sum", 8, iters=iters, warmup=warmup,
                                            in_place=False, root=0, device=dev, counter=cnt, method=Method())
                    wrong += m.wrong
                    slowest = torch.tensor([m.mean_us], device=dev)
                    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
                    rows.setdefault((warmup, iters, cnt is not None), []).append((m.iters, float(slowest.item())))
    if rank == 0:
        tag = os.environ.get("NCCL_GRAPH_MIXING_SUPPORT", "default")
        for (warmup, iters, cnt), v in rows.items():
            print(f"mixing={tag} warmup={warmup} iters={iters} counter={cnt}: ops {v[0][0]}, mean us "
                  + " ".join(f"{us:.2f}" for _, us in v))
    dist.destroy_process_group()
    if not direct or wrong:
        print(f"INVALID run (rank {rank}): " + ("NCCL was not called directly; " if not direct else "")
              + (f"{wrong} wrong elements" if wrong else ""), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
