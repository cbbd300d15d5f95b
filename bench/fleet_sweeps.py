"""Fleet checks on loopback CPU workers (gloo): false verdicts, faults caught, what a sweep costs
user jobs, and quarantine. A real coordinator and worker processes (tests/integration/cluster.py).

    python bench/fleet_sweeps.py --out bench/out/2026-11-24-fleet/sweeps.json

1. clean: --sweeps sweeps of gpu_check + sdc_check over 4 clean workers; every non-healthy
   verdict is a false one.
2. faults: a fifth worker with the fault injector's slowed compute and flipped bit joins; one
   sweep must name it (gpu_check and sdc_check) and no other.
3. delay: a coordinator sweeping continuously (--check-every 1), --jobs user jobs of 2 ranks
   submitted at random moments; for each, the wait from submission to start, and whether a check
   held workers when it was submitted. A job waits at most one check job: the p99 of its wait
   against the p99 of a check job's length.
4. quarantine (with a coordinator that has set_quarantine): the faulty worker, failed, receives
   none of --quarantine-jobs user jobs; after uncordon it receives jobs again.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "integration"), str(ROOT / "tests")]

from cluster import Cluster  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402

CLEAN = ["c0", "c1", "c2", "c3"]
BAD = "bad"
FAULTS = {"RINGLEADER_FAULTS": "slow_compute=8,flip_bit=1", "RINGLEADER_FAULTS_ALLOWED": "tests"}
KINDS = ["gpu_check", "sdc_check"]


def p99(values: list[float]) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(0.99 * len(s)))] if s else 0.0


def clean_sweeps(c: Cluster, sweeps: int) -> dict:
    false, seconds = 0, []
    for _ in range(sweeps):
        t0 = time.monotonic()
        answer = c.client.run_check(pb.RunCheckRequest(worker_ids=CLEAN, kinds=KINDS, wait=True, timeout_s=300))
        seconds.append(time.monotonic() - t0)
        assert all(j.state == pb.SUCCEEDED for j in answer.jobs), [j.reason for j in answer.jobs]
        false += sum(w.health.verdict != pb.HEALTHY for w in answer.workers)
    return dict(sweeps=sweeps, workers=len(CLEAN), false_verdicts=false, seconds_max=round(max(seconds), 2),
                seconds_median=round(sorted(seconds)[len(seconds) // 2], 2))


def faulty_sweep(c: Cluster) -> dict:
    answer = c.client.run_check(pb.RunCheckRequest(worker_ids=[*CLEAN, BAD], kinds=KINDS, wait=True, timeout_s=300))
    named = {j.spec.WhichOneof("kind"): sorted(w.worker_id for w in j.workers
                                               if getattr(j, j.spec.WhichOneof("kind")).workers[w.rank].flagged)
             for j in answer.jobs}
    health = {w.worker_id: pb.Verdict.Name(w.health.verdict) for w in answer.workers}
    return dict(flagged_by_kind=named, verdicts=health, caught=all(v == [BAD] for v in named.values()))


def delays(c: Cluster, jobs: int) -> dict:
    """User jobs against a continuous sweep: their waits, and the check jobs' lengths."""
    waits, held = [], 0
    for _ in range(jobs):
        time.sleep(random.uniform(0.0, 1.5))
        running_checks = [j for j in c.client.list(states=[pb.RUNNING]).jobs if j.spec.priority == -1000]
        job = c.submit(world_size=2, workers=["c0", "c1"], op="all_reduce", sizes=[4096], iters=2, warmup=0)
        done = c.wait_job(job.id, timeout=300)
        assert done.state == pb.SUCCEEDED, done.reason
        held += bool(running_checks)
        waits.append(done.started_at - done.created_at)
    checks = [j for j in c.client.list(limit=1000).jobs if j.spec.priority == -1000 and j.state == pb.SUCCEEDED]
    lengths = [j.finished_at - j.started_at for j in checks]
    return dict(jobs=jobs, submitted_while_a_check_ran=held, wait_p50_s=round(sorted(waits)[len(waits) // 2], 3),
                wait_p99_s=round(p99(waits), 3), wait_max_s=round(max(waits), 3), check_jobs=len(checks),
                check_length_p99_s=round(p99(lengths), 3), check_length_max_s=round(max(lengths, default=0), 3))


def quarantine(c: Cluster, jobs: int) -> dict:
    ids = [*CLEAN, BAD]
    c.client.run_check(pb.RunCheckRequest(worker_ids=ids, kinds=["gpu_check"], wait=True, timeout_s=300))
    assert next(w for w in c.client.workers() if w.worker_id == BAD).state == pb.QUARANTINED
    placed_on_bad = 0
    for _ in range(jobs):
        done = c.wait_job(c.client.submit(pb.JobSpec(world_size=2, collective=pb.CollectiveSpec(
            op="all_reduce", sizes=[1024], iters=1, warmup=0))).id, timeout=300)
        placed_on_bad += any(w.worker_id == BAD for w in done.workers)
    c.client.cordon(BAD, on=False, force=True)  # over its failed verdict: no recheck first
    after = 0
    for _ in range(20):
        done = c.wait_job(c.client.submit(pb.JobSpec(world_size=5, collective=pb.CollectiveSpec(
            op="all_reduce", sizes=[1024], iters=1, warmup=0))).id, timeout=300)
        after += any(w.worker_id == BAD for w in done.workers)
    return dict(jobs_while_quarantined=jobs, placed_on_quarantined=placed_on_bad, jobs_after_uncordon=20,
                placed_on_it_after=after)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sweeps", type=int, default=20)
    p.add_argument("--jobs", type=int, default=50)
    p.add_argument("--quarantine-jobs", type=int, default=100)
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args()
    report: dict = dict(machine=dict(node=platform.node(), cpus=os.cpu_count(), python=platform.python_version()),
                        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), load_average_before=os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(Path(tmp))
        try:
            c.start_coordinator()
            for wid in CLEAN:
                c.start_worker(wid)
            c.wait_idle(CLEAN)
            report["clean"] = clean_sweeps(c, a.sweeps)
            c.start_worker(BAD, env=FAULTS)
            c.wait_idle([BAD])
            report["faults"] = faulty_sweep(c)
            if a.quarantine_jobs:
                report["quarantine"] = quarantine(c, a.quarantine_jobs)
            c.kill_worker(BAD)
            port = int(c.address.rsplit(":", 1)[1])
            c.stop_coordinator()
            c.start_coordinator(port=port, extra=["--check-every", "1"])
            c.wait_idle(CLEAN, timeout=120)
            report["delay"] = delays(c, a.jobs)
        finally:
            c.close()
    report["load_average_after"] = os.getloadavg()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
