# A placement pass with a fleet-wide check waiting (the churn bench's sweep: one gang per kind naming every worker of it),
# the fleet idle but for 20 busy workers of the gang's kind, then 200 one-rank CPU jobs, each followed by a pass.
# usage: python gang-pass.py PRIORITY   (the gangs' priority: 0, ahead of the jobs; -1000, behind them as RunCheck's are)
import sys, time, random
sys.path.insert(0, '/work/main'); sys.path.insert(0, '/work/main/bench')
from scheduler_pass import worker
from coordinator.core.scheduler import Need, PendingJob, Scheduler
for n in (2000, 5000):
    s = Scheduler()
    for i in range(n):
        s.put_worker(worker(i, n, idle=True))
    # the sweep's two gangs: every worker of a kind (ids listed, as RunCheck's jobs name them)
    gpu = tuple(f"w{i}" for i in range(n // 2)); cpu = tuple(f"w{i}" for i in range(n // 2, n))
    s.add(PendingJob("gang-cpu", int(sys.argv[1]), 0.0, Need(len(cpu), worker_ids=cpu, device_type="cpu")))
    s.add(PendingJob("gang-gpu", int(sys.argv[1]), 0.0, Need(len(gpu), worker_ids=gpu, device_type="cuda")))
    # a few cpu workers busy (measured jobs), so the gangs cannot start
    for i in range(n // 2, n // 2 + 20):
        s.put_worker(worker(i, n, idle=False))
    d = s.place()
    times = []
    for k in range(200):
        s.add(PendingJob(f"j{k}", 0, 1.0 + k, Need(1, device_type="cpu")))
        t0 = time.perf_counter(); dec = s.place(); times.append(time.perf_counter() - t0)
    times.sort()
    print(n, 'decisions', len(dec), 'pass ms p50', round(times[100]*1e3, 3), 'p99', round(times[198]*1e3, 3))
