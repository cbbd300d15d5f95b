import random, sys, time, statistics
root = sys.argv[1]; sys.path.insert(0, root)
from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView
def run(n, q, seed):
    rng = random.Random(seed); s = Scheduler()
    for i in range(n):
        gpu = i < n // 2
        s.put_worker(WorkerView(f"w{i}", f"h{i // 8}", "cuda" if gpu else "cpu", i % 8, "H100" if gpu else "cpu", 80 << 30 if gpu else 0, "nccl" if gpu else "gloo", True))
    for i in range(q):
        s.add(PendingJob(f"g{i}", rng.choice([0, 0, 0, 1, 2]), float(i), Need(rng.choice([1, 2, 2, 4, 4, 8]), device_type=rng.choice(["cpu", "cuda"]))))
    t = time.perf_counter(); d = s.place(); el = time.perf_counter() - t
    return el, len(d)
for n in (3000, 5000):
    ts = [run(n, 2 * n, k) for k in range(5)]
    print(root.split("/")[-1] or root, f"workers {n}: pass over all idle, {ts[0][1]} jobs placed, ms median {statistics.median(t for t, _ in ts) * 1e3:.1f}")
