"""Control-plane load test: a real coordinator process (SQLite store, HTTP side on), N simulated
worker daemons over the real WorkerService stream (bench/simfleet.py, from a few processes), and
a client that submits at a fixed rate and measures SubmitJob, GetJob and ListWorkers latency
with the coordinator's CPU and RSS (read from /proc).

    python bench/control_plane.py --workers 2000 --duration 300          # one configuration
    python bench/control_plane.py --matrix --out bench/results/DATE-control-plane

One configuration: start the coordinator; connect N daemons (8 per host, half the hosts with
GPUs); measure a window of heartbeats alone (CPU per heartbeat); with --queue, hold every GPU
worker with a job that never ends and fill the queue with GPU jobs of mixed shapes (sizes,
priorities, some pinned to a host) that must wait; then for --duration submit at --rate (jobs
that complete on the CPU workers, or with --queue half of them GPU jobs that queue), get a
random submitted job at the same rate, and list one page of workers twice a second. Calls are
started on a fixed schedule whatever the answers do (open loop), with a 30 s deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import platform
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import loadstats  # noqa: E402
from bench.simfleet import SimFleet, fleet_specs  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402

DEADLINE_S = 30.0


@dataclasses.dataclass
class Config:
    workers: int
    queue: int = 0  # jobs waiting before the measured window
    rate: float = 50.0  # submits (and gets) per second
    duration: float = 60.0
    heartbeat_window: float = 20.0
    list_rate: float = 2.0
    coordinator_cpus: tuple[int, ...] = ()  # pin the coordinator (the load generator stays off them)
    db: str = "sqlite"  # the coordinator's store: sqlite (a file) or postgres (the bench's own server)


# ---- the coordinator ------------------------------------------------------------------------------


def start_coordinator(tmp: Path, cpus: set[int] | None = None, db: str = "") -> tuple[subprocess.Popen, str, str]:
    """Start `ringleader coordinator` (on `cpus` only, if given; `db`: its --db, default an SQLite
    file in `tmp`); returns it, its gRPC address and URL."""
    log = open(tmp / "coordinator.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "127.0.0.1:0",
                             "--http-address", "127.0.0.1:0", "--db", db or str(tmp / "jobs.db")],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    log.close()
    line = proc.stdout.readline().strip()  # "ringleader coordinator: gRPC HOST:PORT, HTTP URL"
    if line.startswith("ringleader coordinator: standby"):  # on PostgreSQL: the lease first (alone: at once)
        line = proc.stdout.readline().strip()
    if not line.startswith("ringleader coordinator: gRPC "):
        proc.kill()
        raise RuntimeError(f"coordinator did not start: {line!r}; see {tmp / 'coordinator.log'}")
    return proc, line.split()[3].rstrip(","), line.split()[-1]


def job_spec(rng: random.Random, device_type: str, queued: bool, hosts: int) -> pb.JobSpec:
    spec = pb.JobSpec(world_size=rng.choice([1, 1, 2, 2, 4] if not queued else [1, 2, 4, 8]),
                      placement=pb.Placement(device_type=device_type),
                      priority=rng.choice([0, 0, 0, 1, 2]) if queued else 0,
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 65536], iters=1, warmup=0))
    if queued and rng.random() < 0.05:  # a few pinned to one GPU host: more distinct needs
        spec.placement.host = f"sim-h{rng.randrange(hosts // 2):04}"
    return spec


# ---- the measured client --------------------------------------------------------------------------


async def paced(rate: float, duration: float, call) -> None:
    """Start `call()` every 1/rate s for `duration`, not waiting for answers (open loop)."""
    loop = asyncio.get_running_loop()
    t0, tasks, i = loop.time(), set(), 0
    while (due := t0 + i / rate) < t0 + duration:
        await asyncio.sleep(max(0.0, due - loop.time()))
        task = asyncio.create_task(call())
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
    await asyncio.gather(*tasks)


async def timed(rec: loadstats.Recorder, coro) -> object:
    t = time.perf_counter()
    try:
        out = await coro
    except grpc.aio.AioRpcError as exc:
        rec.fail(t, exc.code().name)
        return None
    rec.ok(t, time.perf_counter() - t)
    return out


async def fill(stub, specs, concurrency: int = 32) -> None:
    todo = list(specs)

    async def worker() -> None:
        while todo:
            await stub.SubmitJob(pb.SubmitJobRequest(spec=todo.pop(), request_id=uuid.uuid4().hex),
                                 timeout=DEADLINE_S)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def until(check, what: str, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        await asyncio.sleep(0.5)


async def run_config(cfg: Config, tmp: Path, db: str = "") -> dict:
    rng = random.Random(cfg.workers * 7 + cfg.queue)
    coord, address, http_url = start_coordinator(tmp, set(cfg.coordinator_cpus), db)
    watch = loadstats.ProcessWatch(coord.pid)
    sims = SimFleet(address, cfg.workers)
    out: dict = {"config": dataclasses.asdict(cfg)}
    try:
        async with grpc.aio.insecure_channel(address) as channel:
            stub = jobs_pb2_grpc.JobServiceStub(channel)
            await until(lambda: sims.stats().registered >= cfg.workers, f"{cfg.workers} registrations")
            out["heartbeat"] = await heartbeat_window(cfg, sims, watch)
            if cfg.queue:
                await hold_gpus_and_queue(cfg, stub, sims, rng)
            out.update(await measured_window(cfg, stub, watch, sims, rng))
            out["queue_depth_end"] = loadstats.metric(http_url, "ringleader_queue_depth")
    finally:
        try:
            final = sims.stop()
        finally:
            coord.terminate()
            coord.wait(60)
    log = (tmp / "coordinator.log").read_text(errors="replace")
    out["workers_declared_lost"] = len(re.findall(r"left: no heartbeat", log))
    out["streams_ended_by_coordinator"] = final.dropped
    return out


async def heartbeat_window(cfg: Config, sims: SimFleet, watch: loadstats.ProcessWatch) -> dict:
    before, cpu0 = sims.stats().heartbeats, watch.cpu_s()
    await asyncio.sleep(cfg.heartbeat_window)
    beats, cpu = sims.stats().heartbeats - before, watch.cpu_s() - cpu0
    return {"heartbeats": beats, "cpu_s": cpu, "cpu_us_per_heartbeat": cpu / max(1, beats) * 1e6,
            "cpu_percent": cpu / cfg.heartbeat_window * 100}


async def hold_gpus_and_queue(cfg: Config, stub, sims: SimFleet, rng: random.Random) -> None:
    gpus = sum(1 for s in fleet_specs(cfg.workers) if s.device[0] == "cuda")
    base = sims.stats().assignments
    hold = pb.JobSpec(world_size=1, name="hold", placement=pb.Placement(device_type="cuda"),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024], iters=1))
    await fill(stub, [hold] * gpus)
    await until(lambda: sims.stats().assignments - base >= gpus, "every GPU worker held")
    await fill(stub, [job_spec(rng, "cuda", True, cfg.workers // 8) for _ in range(cfg.queue)])


async def measured_window(cfg: Config, stub, watch: loadstats.ProcessWatch, sims: SimFleet,
                          rng: random.Random) -> dict:
    submit, get, lister = loadstats.Recorder(), loadstats.Recorder(), loadstats.Recorder()
    ids: list[str] = []
    hosts = cfg.workers // 8

    async def one_submit() -> None:
        queued = bool(cfg.queue) and rng.random() < 0.5
        spec = job_spec(rng, "cuda" if queued else "cpu" if cfg.queue else rng.choice(["", "cpu", "cuda"]),
                        queued, hosts)
        job = await timed(submit, stub.SubmitJob(pb.SubmitJobRequest(spec=spec, request_id=uuid.uuid4().hex),
                                                 timeout=DEADLINE_S))
        if job is not None:
            ids.append(job.id)

    async def one_get() -> None:
        if ids:
            await timed(get, stub.GetJob(pb.GetJobRequest(job_id=rng.choice(ids)), timeout=DEADLINE_S))

    async def one_list() -> None:
        await timed(lister, stub.ListWorkers(pb.ListWorkersRequest(), timeout=DEADLINE_S))

    sampler = asyncio.create_task(watch.sample_forever())
    done0, sims_cpu0, cpu0, t0 = sims.stats().done, sims.cpu_s(), watch.cpu_s(), time.perf_counter()
    await asyncio.gather(paced(cfg.rate, cfg.duration, one_submit), paced(cfg.rate, cfg.duration, one_get),
                         paced(cfg.list_rate, cfg.duration, one_list))
    elapsed, cpu = time.perf_counter() - t0, watch.cpu_s() - cpu0
    sampler.cancel()
    return {"submit": submit.summary(t0), "get": get.summary(t0), "list_workers": lister.summary(t0),
            "elapsed_s": elapsed, "cpu_s": cpu, "cpu_percent": cpu / elapsed * 100,
            "rss_mb_max": watch.rss_max_mb, "ranks_done": sims.stats().done - done0,
            "load_generator_cpu_percent": (sims.cpu_s() - sims_cpu0) / elapsed * 100}


# ---- main -------------------------------------------------------------------------------------------

MATRIX = [Config(200), Config(1000), Config(2000), Config(5000), Config(2000, duration=300.0),
          Config(2000, queue=1000), Config(2000, queue=10_000)]


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    return {"nproc": os.cpu_count(), "cpu_model": cpu, "python": platform.python_version(),
            "grpcio": grpc.__version__, "kernel": platform.release()}


def postgres_server():
    """A PostgreSQL server of this run's own, stopped at exit (tests/pgserver.py)."""
    import atexit

    sys.path.insert(0, str(ROOT / "tests"))
    from pgserver import PostgresServer

    server = PostgresServer().start()
    atexit.register(server.stop)
    return server


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2000)
    ap.add_argument("--queue", type=int, default=0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--duration", type=float, default=60.0)
    ap.add_argument("--matrix", action="store_true", help="every configuration of the README table")
    ap.add_argument("--only", type=int, nargs="*", default=None, help="with --matrix: these rows (0-based)")
    ap.add_argument("--coordinator-cpus", default="", help="pin the coordinator to these CPUs (e.g. 0,1) "
                    "and keep the load generator off them")
    ap.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    ap.add_argument("--logs", type=Path, default=None, help="keep each run's coordinator log here")
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="sqlite",
                    help="the coordinator's store; postgres: a server of the bench's own (tests/pgserver.py); "
                         "both: each configuration on SQLite, then on PostgreSQL, in the same run")
    a = ap.parse_args()
    configs = [MATRIX[i] for i in (a.only or range(len(MATRIX)))] if a.matrix else \
        [Config(a.workers, a.queue, a.rate, a.duration)]
    cpus = tuple(int(c) for c in a.coordinator_cpus.split(",") if c)
    if cpus:
        os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - set(cpus))  # inherited by the load generator
        configs = [dataclasses.replace(c, coordinator_cpus=cpus) for c in configs]
    stores = ["sqlite", "postgres"] if a.db == "both" else [a.db]
    configs = [dataclasses.replace(c, db=db) for c in configs for db in stores]
    results = {"machine": machine(), "runs": []}
    pg = postgres_server() if a.db != "sqlite" else None
    for i, cfg in enumerate(configs):
        load = os.getloadavg()
        with tempfile.TemporaryDirectory(prefix="rl-cp-") as tmp:
            run = asyncio.run(run_config(cfg, Path(tmp), pg.new_schema(f"run{i}") if cfg.db == "postgres" else ""))
            if a.logs:
                a.logs.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(tmp) / "coordinator.log", a.logs / f"coordinator-{cfg.workers}-{cfg.queue}.log")
        run["loadavg_before"], run["loadavg_after"] = load, os.getloadavg()
        results["runs"].append(run)
        print(f"db={cfg.db} | {loadstats.row(run)}", flush=True)
        if a.out:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / "results.json").write_text(json.dumps(results, indent=1))
            (a.out / "results.md").write_text(loadstats.table(results))


if __name__ == "__main__":
    main()
