"""Standalone: 4 processes take turns as the gpu_check does (one thread, thread CPU clock), and
record every loop's figures: trials x passes x ranks -> (tflops, copy GB/s)."""
import json, sys, time, multiprocessing as mp
import os
N, NB, ITERS, PASSES, RANKS = 512, int(os.environ.get("NB", 8 << 20)), 20, 6, 4
CITERS = int(os.environ.get("CITERS", ITERS))
def rank(me, bar, q, trials):
    import torch
    torch.set_num_threads(1)
    a = torch.randn(N, N); b = torch.randn(N, N); c = torch.empty(N, N)
    src = torch.ones(NB, dtype=torch.uint8); dst = torch.empty(NB, dtype=torch.uint8)
    for _ in range(2): torch.matmul(a, b, out=c); dst.copy_(src)
    for trial in range(trials):
        out = []
        for p in range(PASSES):
            for t in range(RANKS):
                bar.wait()
                if t == me:
                    t0 = time.thread_time()
                    for _ in range(ITERS): torch.matmul(a, b, out=c)
                    tp = time.thread_time() - t0
                    t0 = time.thread_time()
                    for _ in range(CITERS): dst.copy_(src)
                    tc = time.thread_time() - t0
                    out.append((2 * N**3 * ITERS / tp / 1e12, 2 * NB * CITERS / tc / 1e9))
                bar.wait()
        q.put((trial, me, out))
if __name__ == "__main__":
    trials = int(sys.argv[1]); path = sys.argv[2]
    ctx = mp.get_context("spawn"); bar = ctx.Barrier(RANKS); q = ctx.Queue()
    ps = [ctx.Process(target=rank, args=(r, bar, q, trials)) for r in range(RANKS)]
    for p in ps: p.start()
    res = {}
    with open(path, "w") as f:
        for _ in range(trials * RANKS):
            trial, me, out = q.get()
            res.setdefault(trial, {})[me] = out
            if len(res[trial]) == RANKS:
                f.write(json.dumps([res[trial][r] for r in range(RANKS)]) + "\n"); f.flush()
    for p in ps: p.join()
