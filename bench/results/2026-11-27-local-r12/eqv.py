import random, sys, importlib
def run(root, seed):
    for m in [k for k in sys.modules if k.startswith(("coordinator", "ringleader"))]: del sys.modules[m]
    sys.path.insert(0, root)
    from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView
    sys.path.pop(0)
    rng = random.Random(seed)
    n = rng.choice([16, 100, 700]); s = Scheduler()
    for i in range(n):
        gpu = rng.random() < .5
        s.put_worker(WorkerView(f"w{i}", f"h{i // rng.choice([4, 8])}", "cuda" if gpu else "cpu", i % 8, rng.choice(["H100", "A100"]) if gpu else "cpu",
                                80 << 30 if gpu else 0, "nccl" if gpu else "gloo", rng.random() < .7, trusted=rng.random() < .8))
    out = []
    for rnd in range(4):
        for i in range(rng.randrange(50, 400)):
            need = Need(rng.choice([1, 2, 3, 4, 8, 16]), host=f"h{rng.randrange(n // 8)}" if rng.random() < .1 else "",
                        device_type=rng.choice(["cpu", "cuda", ""]))
            s.add(PendingJob(f"g{rnd}-{i}", rng.choice([0, 1, 2]), float(i), need))
        ds = s.place()
        out.append([(d.job_id, d.worker_ids, d.backend) for d in ds])
        for d in ds[: len(ds) // 2]:  # some finish: workers idle again
            for w in d.worker_ids:
                v = s._fleet.views[w]
                s.put_worker(WorkerView(v.worker_id, v.host, v.device_type, v.device_index, v.device_name, v.memory_bytes, v.backend, True, trusted=v.trusted))
    return out
bad = 0
for seed in range(60):
    a, b = run("/tmp/oldtree", seed), run("/work/main", seed)
    if a != b: bad += 1; print("DIFF seed", seed)
    tot = globals().get("tot", 0) + sum(len(x) for x in b); globals()["tot"] = tot
print("total decisions", tot)
print("seeds differing:", bad)
