import random, sys, time, cProfile, pstats
sys.path.insert(0, "/work/main"); sys.path.insert(0, "/work/main/bench")
from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView
def worker(i, n):
    gpu = i < n // 2
    return WorkerView(f"w{i}", f"h{i // 8}", "cuda" if gpu else "cpu", i % 8,
                      "NVIDIA H100" if gpu else "cpu", 80 << 30 if gpu else 0, "nccl" if gpu else "gloo", True)
rng = random.Random(1)
n, q = 3000, 6000
s = Scheduler()
for i in range(n): s.put_worker(worker(i, n))
for i in range(q):
    s.add(PendingJob(f"g{i}", rng.choice([0, 0, 0, 1, 2]), float(i), Need(rng.choice([1, 2, 2, 4, 4, 8]), device_type=rng.choice(["cpu", "cuda"]))))
pr = cProfile.Profile()
t = time.perf_counter(); pr.enable(); d = s.place(); pr.disable(); el = time.perf_counter() - t
print("decisions", len(d), "ranks", sum(len(x.worker_ids) for x in d), "ms", el * 1e3, "per decision us", el / len(d) * 1e6)
pstats.Stats(pr).sort_stats("tottime").print_stats(14)
