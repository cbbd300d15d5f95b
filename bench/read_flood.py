"""A flood of users' reads beside a fleet's heartbeats: how long worker messages wait for their turn
on the coordinator's core, and whether any worker is declared lost.

Users' calls hopped onto the core start ahead of worker messages, at most 8 between two
(coordinator/edge/hop.py's lane). A flood of reads could so hold heartbeats back past
--heartbeat-timeout (5 s). This bench starts a real coordinator (bench/control_plane.py's), N
simulated daemons at 1 Hz (bench/simfleet.py), submits --jobs jobs for the reads to find, then
for --duration runs --clients closed-loop readers (GetJob of a random job, ListJobs one page in
ten) in --procs processes, as fast as the coordinator answers, while it reads the coordinator's
`ringleader_worker_message_wait_seconds` and `ringleader_loop_lag_seconds` four times a second.

    python bench/read_flood.py --workers 2000 --duration 30 --out bench/out/DATE-read-flood

The run is valid when the flood was one (the coordinator busy at least --min-cpu % of a core
through the window, as a saturated core loop is) and no read failed but as RESOURCE_EXHAUSTED;
a worker declared lost is the finding, not an invalid run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import platform
import random
import re
import sys
import tempfile
import time
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

import loadstats  # noqa: E402
from control_plane import start_coordinator, until  # noqa: E402
from simfleet import SimFleet  # noqa: E402

from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402


def _reader(address: str, ids: list[str], clients: int, duration: float, seed: int, out) -> None:
    """One process of readers: `clients` closed loops on one channel; sends back (latencies, errors)."""

    async def main() -> tuple[list[float], dict]:
        rng, lat, errors = random.Random(seed), [], {}
        async with grpc.aio.insecure_channel(address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            end = time.monotonic() + duration

            async def loop() -> None:
                while time.monotonic() < end:
                    t0 = time.perf_counter()
                    try:
                        if rng.random() < 0.1:
                            await stub.ListJobs(pb.ListJobsRequest(limit=50), timeout=30)
                        else:
                            await stub.GetJob(pb.GetJobRequest(job_id=rng.choice(ids)), timeout=30)
                        lat.append(time.perf_counter() - t0)
                    except grpc.aio.AioRpcError as e:
                        errors[e.code().name] = errors.get(e.code().name, 0) + 1

            await asyncio.gather(*(loop() for _ in range(clients)))
        return lat, errors

    out.send(asyncio.run(main()))


async def run(a: argparse.Namespace, tmp: Path) -> dict:
    coord, address, http_url = start_coordinator(tmp)
    watch = loadstats.ProcessWatch(coord.pid)
    sims = SimFleet(address, a.workers)
    out: dict = {"config": {k: v for k, v in vars(a).items() if k != "out"}}
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            await until(lambda: sims.stats().registered >= a.workers, f"{a.workers} registrations")
            spec = pb.JobSpec(world_size=1, placement=pb.Placement(device_type="cpu"),
                              collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1, warmup=0))
            ids = [(await stub.SubmitJob(pb.SubmitJobRequest(spec=spec), timeout=30)).id for _ in range(a.jobs)]
            await asyncio.sleep(2)  # the jobs run and end; the fleet is back to heartbeats alone
            ctx = mp.get_context("spawn")
            pipes, procs = [], []
            for i in range(a.procs):
                parent, child = ctx.Pipe()
                p = ctx.Process(target=_reader, args=(address, ids, a.clients // a.procs, a.duration, i, child), daemon=True)
                p.start()
                pipes.append(parent)
                procs.append(p)
            readings, beats0, cpu0, t0 = [], sims.stats().heartbeats, watch.cpu_s(), time.monotonic()
            while time.monotonic() - t0 < a.duration:
                await asyncio.sleep(0.25)
                wait, lag = await asyncio.gather(
                    asyncio.to_thread(loadstats.metric, http_url, "ringleader_worker_message_wait_seconds"),
                    asyncio.to_thread(loadstats.metric, http_url, "ringleader_loop_lag_seconds"))
                readings.append((round(time.monotonic() - t0, 2), wait, lag))
            window, cpu = time.monotonic() - t0, watch.cpu_s() - cpu0
            beats = sims.stats().heartbeats - beats0
            lat, errors = [], {}
            for pipe, p in zip(pipes, procs):
                got_lat, got_err = await asyncio.to_thread(pipe.recv)
                lat += got_lat
                for k, v in got_err.items():
                    errors[k] = errors.get(k, 0) + v
                p.join(10)
    finally:
        try:
            sims.stop()
        finally:
            coord.terminate()
            coord.wait(60)
            coord.stdout.close()
    lat.sort()
    waits = sorted(w for _, w, _ in readings if w is not None)
    log = (tmp / "coordinator.log").read_text(errors="replace")
    out.update(
        reads=len(lat), reads_per_s=round(len(lat) / window, 1), read_errors=errors,
        read_p50_ms=loadstats.pct(lat, 50), read_p99_ms=loadstats.pct(lat, 99),
        heartbeats_in_window=beats, coordinator_cpu_percent=round(cpu / window * 100, 1),
        message_wait_worst_ms=round(waits[-1] * 1e3, 1) if waits else None,
        message_wait_p50_of_readings_ms=round(waits[len(waits) // 2] * 1e3, 1) if waits else None,
        loop_lag_worst_ms=round(max((g for _, _, g in readings if g is not None), default=0.0) * 1e3, 1),
        workers_declared_lost=len(re.findall(r"left: no heartbeat", log)), readings=readings)
    problems = []
    if out["coordinator_cpu_percent"] < a.min_cpu:
        problems.append(f"no flood: the coordinator used {out['coordinator_cpu_percent']} % of a core (< {a.min_cpu})")
    if any(k != "RESOURCE_EXHAUSTED" for k in errors):
        problems.append(f"reads failed: {errors}")
    out["invalid"] = problems
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2000)
    ap.add_argument("--jobs", type=int, default=200, help="jobs submitted first, for the reads to find")
    ap.add_argument("--clients", type=int, default=64, help="closed-loop readers in all")
    ap.add_argument("--procs", type=int, default=2, help="processes the readers run in")
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--min-cpu", type=float, default=90.0, help="%% of a core the coordinator must use for a flood")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        out = asyncio.run(run(a, Path(tmp)))
    out["machine"] = {"node": platform.node(), "cpus": mp.cpu_count(), "python": platform.python_version(),
                      "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    summary = {k: v for k, v in out.items() if k != "readings"}
    print(json.dumps(summary, indent=1))
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)
        (a.out / f"read-flood-{a.workers}.json").write_text(json.dumps(out, indent=1) + "\n")
    if out["invalid"]:
        print("INVALID:", "; ".join(out["invalid"]))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
