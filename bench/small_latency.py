"""Diagnose the small-message floor: plain eager loop vs per-iteration events vs collectives.measure.

torchrun --standalone --nproc-per-node 2 bench/small_latency.py
"""

import os
import sys
import time

import torch
import torch.distributed as dist

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from worker import collectives  # noqa: E402

ITERS = 200


def main(rank=None, port=None):
    if rank is None:
        rank = int(os.environ["RANK"])
        dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(dev)
        dist.init_process_group("nccl", device_id=dev)
    else:  # as ringleader's executor does: spawned, rank 0 hosts the TCP store
        import datetime
        dev = torch.device("cuda", rank)
        torch.cuda.set_device(dev)
        store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, timeout=datetime.timedelta(seconds=60),
                              wait_for_workers=False)
        dist.init_process_group("nccl", store=store, rank=rank, world_size=2, device_id=dev,
                                timeout=datetime.timedelta(seconds=60))
    x = torch.ones(2, device=dev)
    for name, fn in [("all_reduce", lambda: dist.all_reduce(x)), ("broadcast", lambda: dist.broadcast(x, 0)),
                     ("reduce", lambda: dist.reduce(x, 0))]:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t0 = time.perf_counter()
        s.record()
        for _ in range(ITERS):
            fn()
        e.record()
        e.synchronize()
        host = (time.perf_counter() - t0) / ITERS * 1e6
        plain = s.elapsed_time(e) * 1000 / ITERS
        evs = [torch.cuda.Event(enable_timing=True) for _ in range(ITERS + 1)]
        dist.barrier()
        for k in range(ITERS):
            evs[k].record()
            fn()
        evs[ITERS].record()
        torch.cuda.synchronize()
        perit = evs[0].elapsed_time(evs[ITERS]) * 1000 / ITERS
        m = collectives.measure(name, "float32", "sum", 8, iters=ITERS, warmup=20, in_place=False, root=0, device=dev)
        ours = sum(m.times_us) / ITERS
        if rank == 0:
            print(f"{name:>10} 8B: plain {plain:6.1f} us (host {host:6.1f})  per-iteration events {perit:6.1f}  "
                  f"collectives.measure {ours:6.1f}   OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    if sys.argv[1:] == ["spawn"]:
        import multiprocessing as mp
        import socket
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            port = sk.getsockname()[1]
        ctx = mp.get_context("spawn")
        procs = [ctx.Process(target=main, args=(r, port)) for r in range(2)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
    else:
        main()
