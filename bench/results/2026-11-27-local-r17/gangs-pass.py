"""r17 probe: one placement pass's cost at 10,000 workers (8 a host, GPU half and CPU half, 80 %
of each busy at random) with the sweep's check gangs of 32 queued at priority -1000 (313 a
backend, as coordinator/health/sweeper.py plans a fleet-wide gpu_check) against none; a busy
worker frees up and the pass runs (its job ended: the worker goes back busy, as user jobs take
it). Also the old plan: one gang of every worker of a backend."""
import random, statistics, sys, time
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[3]))
from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView

N = 10_000
def view(i, idle):
    gpu = i < N // 2
    return WorkerView(f"w{i}", f"h{i // 8}", "cuda" if gpu else "cpu", i % 8, "NVIDIA H100" if gpu else "cpu",
                      80 << 30 if gpu else 0, "nccl" if gpu else "gloo", idle)

def run(gangs):
    rng = random.Random(1)
    s = Scheduler()
    idle = {i: rng.random() > 0.8 for i in range(N)}
    for i in range(N):
        s.put_worker(view(i, idle[i]))
    for k, ids in enumerate(gangs):
        s.add(PendingJob(f"c{k}", -1000, float(k), Need(len(ids), frozenset({"nccl" if ids[0] < N // 2 else "gloo"}),
                                                         worker_ids=tuple(f"w{i}" for i in ids))))
    s.place()
    busy = [i for i in range(N) if not idle[i]]
    times, dec = [], 0
    for r in range(400):
        i = busy[rng.randrange(len(busy))]
        s.put_worker(view(i, True))
        t = time.perf_counter(); d = s.place(); times.append((time.perf_counter() - t) * 1e3)
        dec += len(d)
        s.put_worker(view(i, False))
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.99)], dec

gangs32 = [list(range(a, min(a + 32, b))) for lo, b in ((0, N // 2), (N // 2, N)) for a in range(lo, b, 32)]
whole = [list(range(0, N // 2)), list(range(N // 2, N))]
def main():
  for name, g in (("none", []), ("2 gangs of 5,000 (old plan)", whole), (f"{len(gangs32)} gangs of <= 32", gangs32)):
      p50, p99, dec = run(g)
      print(f"{name}: pass ms p50 {p50:.3f} p99 {p99:.3f}, decisions {dec}")
      if dec:  # the scenario: every check waits the whole time (none of its sets is all idle)
          print(f"INVALID run ({name}): {dec} check(s) started, so they were not all waiting")
          raise SystemExit(1)
if __name__ == "__main__": main()
