"""Cost of one scheduling pass (coordinator/core/scheduler.py), in-process, against queue length and
fleet size: no gRPC, no store, only the decisions the Dispatcher asks for after each event.

    python bench/scheduler_pass.py

The fleet: N workers, 8 per host, the first half GPUs (busy, each running a job) and the rest
CPUs (idle). The queue: Q GPU jobs that wait (world sizes 1-8, priorities 0-2, one in twenty
pinned to a host). Two events, each followed by a pass, timed over many repetitions:
- submit: a 1-rank CPU job arrives and starts at once on an idle CPU worker (which then ends it);
- freed: a GPU worker finishes its job, and the head of the GPU queue takes it (or waits).
Asserts its scenario: each submit is placed at once on an idle CPU worker, and a freed GPU goes
only to GPU jobs; otherwise the run is INVALID and exits 1.
"""

from __future__ import annotations

import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from coordinator.core.scheduler import Need, PendingJob, Scheduler, WorkerView  # noqa: E402


def worker(i: int, n: int, idle: bool) -> WorkerView:
    gpu = i < n // 2
    return WorkerView(f"w{i}", f"h{i // 8}", "cuda" if gpu else "cpu", i % 8,
                      "NVIDIA H100" if gpu else "cpu", 80 << 30 if gpu else 0, "nccl" if gpu else "gloo", idle)


def setup(n: int, q: int, rng: random.Random) -> Scheduler:
    s = Scheduler()
    for i in range(n):
        s.put_worker(worker(i, n, idle=i >= n // 2))
    for i in range(q):
        s.add(PendingJob(f"g{i}", rng.choice([0, 0, 1, 2]), float(i), Need(
            rng.choice([1, 2, 4, 8]), host=f"h{rng.randrange(n // 16)}" if rng.random() < 0.05 else "",
            device_type="cuda")))
    s.place()
    return s


def per_event_us(n: int, q: int, reps: int = 2000) -> tuple[float, float]:
    rng = random.Random(n + q)
    s = setup(n, q, rng)
    t = time.perf_counter()
    for i in range(reps):
        s.add(PendingJob(f"c{i}", 0, 1e9 + i, Need(1, device_type="cpu")))
        placed = s.place()
        if len(placed) != 1 or int(placed[0].worker_ids[0][1:]) < n // 2:
            sys.exit(f"INVALID: a 1-rank CPU submit was not placed at once on a CPU worker: {placed}")
        wid = placed[0].worker_ids[0]
        s.put_worker(worker(int(wid[1:]), n, idle=False))
        s.put_worker(worker(int(wid[1:]), n, idle=True))  # it ends (no pass: measured above)
    submit = (time.perf_counter() - t) / reps * 1e6
    t = time.perf_counter()
    for i in range(reps):
        gpu = rng.randrange(n // 2)
        s.put_worker(worker(gpu, n, idle=True))
        for d in s.place():
            if any(int(w[1:]) >= n // 2 for w in d.worker_ids):
                sys.exit(f"INVALID: a GPU job was placed on a CPU worker: {d}")
            for wid in d.worker_ids:
                s.put_worker(worker(int(wid[1:]), n, idle=False))
        s.put_worker(worker(gpu, n, idle=False))  # taken by a queued job, or busy again
    freed = (time.perf_counter() - t) / reps * 1e6
    return submit, freed


def main() -> None:
    print("| workers | queued GPU jobs | submit + pass, us | worker freed + pass, us |")
    print("|---:|---:|---:|---:|")
    for n in (200, 2000, 5000):
        for q in (0, 1000, 10_000, 100_000):
            submit, freed = per_event_us(n, q)
            print(f"| {n:,} | {q:,} | {submit:.0f} | {freed:.0f} |", flush=True)


if __name__ == "__main__":
    main()
