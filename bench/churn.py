"""The churn scenario of bench/control_plane.py: every worker drains a deep queue of jobs that run.

Every simulated worker is first held by a job that never ends, then --queue jobs that run
(0.2-1 s each on the simulated daemons, 1 to 8 ranks, CPU or GPU) are queued behind them; then the
holds are cancelled all at once, and for --duration the fleet drains the queue while a fleet-wide
check sweep (RunCheck gpu_check over every worker: gangs of a few hosts each, which start as
their workers free up) joins it and the user calls of control_plane.measured_window are measured.
Reported: how long the drain took, jobs finished by state, the coordinator's CPU per finished job,
the sweep's gang jobs by state. The run is invalid unless the queue drained, no job failed, and
the sweep started and none of its jobs failed.
"""

from __future__ import annotations

import asyncio
import collections
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import grpc

from bench import loadstats
from bench.calls import DEADLINE_S, fill, until
from bench.simfleet import fleet_specs
from ringleader.v1 import jobs_pb2 as pb

STATES = ("succeeded", "failed", "cancelled")


def hold(device_type: str, timeout_s: float = 0.0) -> pb.JobSpec:
    """A job that never ends on the simulated daemons (bench/simfleet.py: named "hold")."""
    return pb.JobSpec(world_size=1, name="hold", placement=pb.Placement(device_type=device_type),
                      rendezvous_timeout_s=timeout_s, op_timeout_s=timeout_s,
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))


def job(rng: random.Random) -> pb.JobSpec:
    """A job that runs: 1-8 ranks of either kind of worker, two sizes (two result rows)."""
    return pb.JobSpec(world_size=rng.choice([1, 2, 2, 4, 4, 8]),
                      placement=pb.Placement(device_type=rng.choice(["cpu", "cuda"])),
                      priority=rng.choice([0, 0, 0, 1, 2]),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 65536], iters=1, warmup=0))


async def call(rpc):
    """The bench's own calls (not measured): an error is the run's, counted, never its end."""
    try:
        return await rpc
    except grpc.aio.AioRpcError as exc:
        UNANSWERED[exc.code().name] += 1
        return None


UNANSWERED: collections.Counter[str] = collections.Counter()


def counts(http_url: str) -> dict[str, float]:
    return {s: loadstats.metric(http_url, f'ringleader_jobs_finished_total{{state="{s}"}}') or 0.0 for s in STATES}


async def run(cfg, stub, sims, watch, http_url: str, rng: random.Random, measured_window) -> dict:

    specs = fleet_specs(cfg.workers)
    base = sims.stats().assignments
    holds = await fill(stub, [hold(s.device[0], cfg.hold_timeout_s) for s in specs])
    await until(lambda: sims.stats().assignments - base >= len(specs), "every worker held")
    await fill(stub, [job(rng) for _ in range(cfg.queue)])
    profiler = profile(watch.pid, cfg.duration)
    before, cpu0, t0 = counts(http_url), watch.cpu_s(), time.perf_counter()
    sem = asyncio.Semaphore(32)

    async def cancel(job_id: str) -> None:
        async with sem:
            await call(stub.CancelJob(pb.CancelJobRequest(job_id=job_id, reason="churn: the drain starts"),
                                      timeout=DEADLINE_S))

    drained: list[float] = []
    waits: list[float] = []  # the longest a worker message waited for the core, each second

    async def drain() -> None:
        # Queued jobs left by the drain: the measured submits add a few that start at once.
        while time.perf_counter() - t0 < cfg.duration:
            # From a thread: a blocking scrape here held the bench's own loop (and every call it
            # was timing) for as long as a saturated coordinator took to render /metrics.
            depth, wait = await asyncio.to_thread(loadstats.metrics, http_url, "ringleader_queue_depth",
                                                  "ringleader_worker_message_wait_seconds")
            if wait is not None:
                waits.append(round(wait, 3))
            if depth is not None and depth <= max(10, cfg.rate):
                drained.append(time.perf_counter() - t0)
                return
            await asyncio.sleep(1.0)  # each look renders /metrics: its CPU is the coordinator's

    async def sweep() -> list[str]:
        await asyncio.sleep(1.0)  # into the drain, not before it
        answer = await call(stub.RunCheck(pb.RunCheckRequest(kinds=["gpu_check"]), timeout=DEADLINE_S))
        return [j.id for j in answer.jobs] if answer else []

    cancels = asyncio.gather(*(cancel(h) for h in holds))
    window = asyncio.create_task(measured_window(cfg, stub, watch, sims, rng))
    sweep_ids, *_ = await asyncio.gather(sweep() if cfg.sweep else asyncio.sleep(0, []), drain(), cancels)
    out = await window
    if profiler:
        profiler.wait(60)
    after, cpu = counts(http_url), watch.cpu_s() - cpu0
    done = {s: after[s] - before[s] for s in STATES}
    ran = done["succeeded"] + done["failed"]
    sweep_jobs = [await call(stub.GetJob(pb.GetJobRequest(job_id=i), timeout=DEADLINE_S)) for i in sweep_ids]
    sweep_states = [pb.JobState.Name(j.state) if j else "UNANSWERED" for j in sweep_jobs]
    verdicts = await not_healthy(stub)
    return {**out, "verdicts_not_healthy": verdicts, "drain_s": drained[0] if drained else None, "jobs_finished": done, "jobs_failed": done["failed"],
            "cpu_ms_per_job": cpu / max(1.0, ran) * 1e3, "sweep_jobs": sweep_states, "holds": len(holds),
            "worker_message_wait_s": waits,
            "bench_calls_unanswered": dict(UNANSWERED)}


def profile(pid: int, seconds: float) -> subprocess.Popen | None:
    """With RINGLEADER_BENCH_PROFILE=PATH: py-spy samples the coordinator through the drain
    (folded stacks in PATH, for a flame graph or `sort -k2 -n`); RINGLEADER_BENCH_PROFILE_ARGS adds
    py-spy's own options (`--threads --idle`: each thread's waits as well)."""
    path = os.environ.get("RINGLEADER_BENCH_PROFILE")
    if not path:
        return None
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    return subprocess.Popen([spy, "record", "--pid", str(pid), "--duration", str(int(seconds)), "--rate", "200",
                             "--format", "raw", "--output", path, "--nonblocking",
                             *os.environ.get("RINGLEADER_BENCH_PROFILE_ARGS", "").split()])


async def not_healthy(stub) -> dict[str, int]:
    """Workers left with a verdict other than HEALTHY, per verdict: a fault-free simulated fleet's
    sweep must leave none (a verdict storm is another scenario, with another cost)."""
    counts: dict[str, int] = {}
    token = ""
    while True:
        page = await call(stub.ListWorkers(pb.ListWorkersRequest(limit=1000, page_token=token), timeout=DEADLINE_S))
        if page is None:
            counts["UNANSWERED"] = counts.get("UNANSWERED", 0) + 1
            return counts
        for w in page.workers:
            v = w.health.verdict
            if v not in (pb.VERDICT_UNSPECIFIED, pb.HEALTHY):
                counts[pb.Verdict.Name(v)] = counts.get(pb.Verdict.Name(v), 0) + 1
        token = page.next_page_token
        if not token:
            return counts


def problems(cfg, out: dict) -> list[str]:
    found = []
    if out.get("verdicts_not_healthy"):
        found.append(f"the sweep of a fault-free simulated fleet left verdicts: {out['verdicts_not_healthy']}")
    if out.get("drain_s") is None:
        found.append(f"the queue of {cfg.queue} did not drain within {cfg.duration:g} s")
    if out["jobs_finished"]["succeeded"] < cfg.queue:
        found.append(f"only {out['jobs_finished']['succeeded']:.0f} of the {cfg.queue} queued jobs succeeded")
    if out.get("bench_calls_unanswered"):
        found.append(f"the bench's own calls were not answered: {out['bench_calls_unanswered']}")
    sweep = out.get("sweep_jobs", [])
    if "FAILED" in sweep:
        found.append(f"the check sweep failed: {sweep}")
    if cfg.sweep and (not sweep or set(sweep) == {"QUEUED"}):
        # Its gangs start as their workers free up once the queue drains; one that never started
        # added no load, and the scenario claims a sweep beside the drain.
        found.append(f"the check sweep never started: {len(sweep)} gang job(s), all still queued")
    return found
