"""Control-plane load test: a real coordinator process (SQLite store, HTTP side on), N simulated
worker daemons over the real WorkerService stream (bench/simfleet.py, from a few processes), and
a client that submits at a fixed rate and measures SubmitJob, GetJob and ListWorkers latency
with the coordinator's CPU and RSS (read from /proc).

    python bench/control_plane.py --workers 2000 --duration 300          # one configuration
    python bench/control_plane.py --matrix --out bench/out/DATE-control-plane

One configuration: start the coordinator; connect N daemons (8 per host, half the hosts with
GPUs); measure a window of heartbeats alone (CPU per heartbeat); with --queue, hold every GPU
worker with a job that never ends and fill the queue with GPU jobs of mixed shapes (sizes,
priorities, some pinned to a host) that must wait; then for --duration submit at --rate (jobs
that complete on the CPU workers, or with --queue half of them GPU jobs that queue), get a
random submitted job at the same rate, and list one page of workers twice a second. Calls are
started on a fixed schedule whatever the answers do (open loop), with a 30 s deadline.

    python bench/control_plane.py --workers 5000 --queue 10000 --churn --coordinator-cpus 0,1

With --churn (bench/churn.py) every worker drains the queue instead, beside a fleet-wide check
sweep. Every run checks the scenario it claims (scenario_problems: no job failed, no worker
lost, the queue kept deep and the GPUs held, or the queue drained); one that did not hold is
printed INVALID with its reasons, and the command exits 1.
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
import urllib.parse
import uuid
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import churn, loadstats  # noqa: E402
from bench.calls import DEADLINE_S, fill, until  # noqa: E402
from bench.simfleet import SimFleet, fleet_specs  # noqa: E402
from ringleader_app.argtypes import cpu_list  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc  # noqa: E402

@dataclasses.dataclass
class Config:
    workers: int
    queue: int = 0  # jobs waiting before the measured window
    rate: float = 50.0  # submits (and gets) per second
    duration: float = 60.0
    heartbeat_window: float = 20.0
    list_rate: float = 2.0
    coordinator_cpus: tuple[int, ...] = ()  # pin the coordinator (the load generator stays off them)
    churn: bool = False  # the queue is drained by every worker instead of waiting behind held GPUs
    sweep: bool = True  # with churn: a fleet-wide check sweep (RunCheck gpu_check) joins the drain
    # The holding jobs' rendezvous and op deadlines (0: the defaults, 30 and 120 s): short in CI,
    # so a simulated daemon that stops marking its group formed fails the run within seconds.
    hold_timeout_s: float = 0.0
    db: str = "sqlite"  # the coordinator's store: sqlite (a file) or postgres (the bench's own server)
    relay: bool = False  # the workers connect to the coordinator's relay process (--worker-address)
    relay_cpus: tuple[int, ...] = ()  # the coordinator's relays run there (--relay-cpus)

    @property
    def scenario(self) -> str:
        return "churn" if self.churn else "deep-queue" if self.queue else "steady"


# ---- the coordinator ------------------------------------------------------------------------------


def start_coordinator(tmp: Path, cpus: set[int] | None = None, db: str = "",
                      relay: bool = False, relay_cpus: tuple = ()) -> tuple[subprocess.Popen, str, str]:
    """Start `ringleader coordinator` (on `cpus` only, if given, its relay process too; `db`: its
    --db, default an SQLite file in `tmp`; `relay`: with a worker relay); returns it, its gRPC
    address and URL. The address the workers connect to is the process's `workers_address`: the
    relay's, or the gRPC address."""
    log = open(tmp / "coordinator.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "127.0.0.1:0",
                             "--http-address", "127.0.0.1:0", "--db", db or str(tmp / "jobs.db"),
                             *(["--worker-address", "127.0.0.1:0"] if relay else []),
                             *(["--relay-cpus", ",".join(map(str, relay_cpus))] if relay_cpus else [])],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    log.close()
    line = proc.stdout.readline().strip()  # "ringleader coordinator: gRPC HOST:PORT, HTTP URL"
    if line.startswith("ringleader coordinator: standby"):  # on PostgreSQL: the lease first (alone: at once)
        line = proc.stdout.readline().strip()
    if not line.startswith("ringleader coordinator: gRPC "):
        proc.kill()
        raise RuntimeError(f"coordinator did not start: {line!r}; see {tmp / 'coordinator.log'}")
    address = line.split()[3].rstrip(",")
    proc.workers_address = proc.stdout.readline().split()[3] if relay else address  # "...: workers HOST:PORT (relay)"
    return proc, address, line.split()[-1]


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


async def run_config(cfg: Config, tmp: Path, db: str = "") -> dict:
    rng = random.Random(cfg.workers * 7 + cfg.queue)
    coord, address, http_url = start_coordinator(tmp, set(cfg.coordinator_cpus), db, cfg.relay, cfg.relay_cpus)
    watch = loadstats.ProcessWatch(coord.pid)  # with its children: the store's writer, the relay
    sims = SimFleet(coord.workers_address, cfg.workers)
    out: dict = {"config": dataclasses.asdict(cfg)}
    try:
        # The measured user has a connection of its own: on the one that carries the bench's
        # own bulk work (thousands of cancels, 32 at a time), the timed calls waited behind it
        # in the client (submit p50 0.7-1.1 s against 26 ms on their own connection, 2,000
        # workers draining 4,000 jobs): that is the bench, not what a user sees. Its own TCP
        # connection too (a subchannel pool of its own): two channels to one address with the same
        # options share one, so the coordinator saw one client, and the user's calls took their
        # turns in the bulk work's queue of the core's lane (coordinator/edge/hop.py), where a
        # user on another machine has a queue of its own.
        own_connection = [("grpc.use_local_subchannel_pool", 1)]
        async with grpc.aio.insecure_channel(address) as channel, \
                grpc.aio.insecure_channel(address, options=own_connection) as own:
            stub, user = jobs_pb2_grpc.JobServiceStub(channel), jobs_pb2_grpc.JobServiceStub(own)
            await until(lambda: sims.stats().registered >= cfg.workers, f"{cfg.workers} registrations")
            out["heartbeat"] = await heartbeat_window(cfg, sims, watch)
            out["streams_moved_to_relay"] = sims.stats().moved  # the coordinator's own relay (--relay-at)
            if cfg.churn:
                out.update(await churn.run(cfg, stub, sims, watch, http_url, rng,
                                           lambda cfg, _bulk, *rest: measured_window(cfg, user, *rest)))
            else:
                if cfg.queue:
                    await hold_gpus_and_queue(cfg, stub, sims, rng)
                failed0 = finished(http_url, "failed")
                out.update(await measured_window(cfg, user, watch, sims, rng))
                out["jobs_failed"] = finished(http_url, "failed") - failed0
            out["queue_depth_end"] = loadstats.metric(http_url, "ringleader_queue_depth")
            out["jobs_running_end"] = loadstats.metric(http_url, 'ringleader_jobs{state="running"}')
    finally:
        try:
            final = sims.stop()
        finally:
            coord.terminate()
            try:
                coord.wait(60)
            except subprocess.TimeoutExpired:  # still busy with what it was sent: the run says so
                coord.kill()
                coord.wait()
                out["coordinator_stop"] = "did not stop within 60 s of SIGTERM: killed"
            coord.stdout.close()
    log = (tmp / "coordinator.log").read_text(errors="replace")
    out["workers_declared_lost"] = len(re.findall(r"left: no heartbeat", log))
    out["streams_ended_by_coordinator"] = final.dropped
    out["rendezvous_timeouts"] = len(re.findall(r"did not form within", log))
    if "window_wall" in out:  # the stalls the coordinator's stall watch named in the measured window
        out["loop_stalls"] = loadstats.stalls(log, *out["window_wall"])
    out["invalid"] = scenario_problems(cfg, out)
    return out


def finished(http_url: str, state: str) -> float:
    return loadstats.metric(http_url, f'ringleader_jobs_finished_total{{state="{state}"}}') or 0.0


def scenario_problems(cfg: Config, out: dict) -> list[str]:
    """Why the run did not measure the scenario it claims ([] when it did): a figure of another
    scenario is no figure (STYLE.md, "Benchmarks check their own scenario")."""
    problems = []
    if out.get("jobs_failed"):
        problems.append(f"{out['jobs_failed']:.0f} jobs failed")
    if out.get("coordinator_stop"):
        problems.append(f"the coordinator {out['coordinator_stop']}")
    if out.get("workers_declared_lost"):
        problems.append(f"{out['workers_declared_lost']} workers declared lost")
    if cfg.scenario == "deep-queue":
        gpus = sum(1 for s in fleet_specs(cfg.workers) if s.device[0] == "cuda")
        if (out.get("queue_depth_end") or 0) < cfg.queue:
            problems.append(f"the queue did not stay deep: {cfg.queue} -> {out.get('queue_depth_end')}")
        if (out.get("jobs_running_end") or 0) < gpus:
            problems.append(f"the GPUs were not held: {out.get('jobs_running_end')} jobs running, {gpus} GPUs")
    if cfg.scenario == "churn":
        problems += churn.problems(cfg, out)
    return problems


async def heartbeat_window(cfg: Config, sims: SimFleet, watch: loadstats.ProcessWatch) -> dict:
    before, cpu0, own0 = sims.stats().heartbeats, watch.cpu_s(), watch.own_cpu_s()
    sampler = asyncio.create_task(watch.sample_forever())
    await asyncio.sleep(cfg.heartbeat_window)
    sampler.cancel()
    beats, cpu, own = sims.stats().heartbeats - before, watch.cpu_s() - cpu0, watch.own_cpu_s() - own0
    # "own": the coordinator's process alone; the rest is its relays' (each its share of the fleet).
    return {"heartbeats": beats, "cpu_s": cpu, "cpu_us_per_heartbeat": cpu / max(1, beats) * 1e6,
            "cpu_percent": cpu / cfg.heartbeat_window * 100, "own_cpu_us_per_heartbeat": own / max(1, beats) * 1e6,
            "own_cpu_percent": own / cfg.heartbeat_window * 100, "rss_own_mb": watch.rss_own_max_mb,
            "rss_relays_mb": watch.rss_children_max_mb,
            "relays": sum(b"coordinator.edge.relay" in _cmdline(p) for p in loadstats.children(watch.pid))}


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


async def hold_gpus_and_queue(cfg: Config, stub, sims: SimFleet, rng: random.Random) -> None:
    gpus = sum(1 for s in fleet_specs(cfg.workers) if s.device[0] == "cuda")
    base = sims.stats().assignments
    await fill(stub, [churn.hold("cuda", cfg.hold_timeout_s)] * gpus)
    await until(lambda: sims.stats().assignments - base >= gpus, "every GPU worker held")
    await fill(stub, [job_spec(rng, "cuda", True, cfg.workers // 8) for _ in range(cfg.queue)])


async def measured_window(cfg: Config, stub, watch: loadstats.ProcessWatch, sims: SimFleet,
                          rng: random.Random) -> dict:
    submit, get, lister = loadstats.Recorder(), loadstats.Recorder(), loadstats.Recorder()
    ids: list[str] = []
    hosts = cfg.workers // 8

    async def one_submit() -> None:
        queued = cfg.scenario == "deep-queue" and rng.random() < 0.5
        device = "cuda" if queued else "cpu" if cfg.scenario == "deep-queue" else rng.choice(["", "cpu", "cuda"])
        spec = job_spec(rng, device, queued, hosts)
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
    wall0 = time.time()
    done0, sims_cpu0, cpu0, t0 = sims.stats().done, sims.cpu_s(), watch.cpu_s(), time.perf_counter()
    await asyncio.gather(paced(cfg.rate, cfg.duration, one_submit), paced(cfg.rate, cfg.duration, one_get),
                         paced(cfg.list_rate, cfg.duration, one_list))
    elapsed, cpu = time.perf_counter() - t0, watch.cpu_s() - cpu0
    sampler.cancel()
    return {"submit": submit.summary(t0), "get": get.summary(t0), "list_workers": lister.summary(t0),
            "elapsed_s": elapsed, "cpu_s": cpu, "cpu_percent": cpu / elapsed * 100,
            "rss_mb_max": watch.rss_max_mb, "rss_own_mb_max": watch.rss_own_max_mb,
            "rss_relays_mb_max": watch.rss_children_max_mb, "ranks_done": sims.stats().done - done0, "window_wall": [wall0, time.time()],
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
    ap.add_argument("--churn", action="store_true", help="every worker drains --queue jobs that run (0.2-1 s "
                    "each) while a fleet-wide check sweep runs and user calls are measured")
    ap.add_argument("--no-sweep", action="store_true", help="with --churn: no check sweep")
    ap.add_argument("--heartbeat-window", type=float, default=20.0)
    ap.add_argument("--worker-relay", action="store_true", help="the workers connect to the coordinator's relay "
                    "process (coordinator --worker-address), on the coordinator's CPUs")
    ap.add_argument("--matrix", action="store_true", help="every configuration of the README table")
    ap.add_argument("--only", type=int, nargs="*", default=None, help="with --matrix: these rows (0-based)")
    ap.add_argument("--coordinator-cpus", default="", help="pin the coordinator to these CPUs (e.g. 0,1) "
                    "and keep the load generator off them")
    ap.add_argument("--relay-cpus", default="", help="the coordinator's relays run on these CPUs (e.g. 2-5: as "
                    "rack relays on hosts of their own would), the load generator off them too")
    ap.add_argument("--out", type=Path, default=None, help="write results.json and results.md here")
    ap.add_argument("--logs", type=Path, default=None, help="keep each run's coordinator log here")
    ap.add_argument("--db", choices=["sqlite", "postgres", "both"], default="sqlite",
                    help="the coordinator's store; postgres: a server of the bench's own (tests/pgserver.py); "
                         "both: each configuration on SQLite, then on PostgreSQL, in the same run")
    ap.add_argument("--pg-options", default="", help="server settings for the PostgreSQL runs' sessions, e.g. "
                    "'-c synchronous_commit=off' (commits not flushed before the answer, as SQLite's WAL with "
                    "synchronous=NORMAL: durable across a coordinator crash, not an operating system's)")
    ap.add_argument("--rounds", type=int, default=1, help="run the configurations this many times (with --db both: "
                    "the stores' order alternates, ABBA)")
    a = ap.parse_args()
    configs = [MATRIX[i] for i in (a.only or range(len(MATRIX)))] if a.matrix else \
        [Config(a.workers, a.queue, a.rate, a.duration, a.heartbeat_window, churn=a.churn, sweep=not a.no_sweep,
                          relay=a.worker_relay)]
    cpus = tuple(int(c) for c in a.coordinator_cpus.split(",") if c)
    if cpus:
        os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - set(cpus))  # inherited by the load generator
        configs = [dataclasses.replace(c, coordinator_cpus=cpus) for c in configs]
    relay_cpus = cpu_list(a.relay_cpus) if a.relay_cpus else ()
    if relay_cpus:
        os.sched_setaffinity(0, set(os.sched_getaffinity(0)) - set(relay_cpus))
        configs = [dataclasses.replace(c, relay_cpus=relay_cpus) for c in configs]
    # --db both with --rounds N: the two stores alternate ABBA (SQLite, PostgreSQL, PostgreSQL,
    # SQLite, ...), so a load that drifts during the run weighs on both alike.
    orders = [["sqlite", "postgres"], ["postgres", "sqlite"]] if a.db == "both" else [[a.db]]
    configs = [dataclasses.replace(c, db=db) for r in range(a.rounds) for c in configs for db in orders[r % len(orders)]]
    results = {"machine": machine(), "runs": []}
    pg = postgres_server() if a.db in ("postgres", "both") else None
    for i, cfg in enumerate(configs):
        load = os.getloadavg()
        with tempfile.TemporaryDirectory(prefix="rl-cp-") as tmp:
            # new_schema's DSN ends in its options parameter: --pg-options continue it.
            dsn = pg.new_schema(f"run{i}") + urllib.parse.quote(" " + a.pg_options) if cfg.db == "postgres" else ""
            try:
                run = asyncio.run(run_config(cfg, Path(tmp), dsn))
            finally:  # a coordinator that did not start says why in its log: kept too
                if a.logs and (Path(tmp) / "coordinator.log").exists():
                    a.logs.mkdir(parents=True, exist_ok=True)
                    shutil.copy(Path(tmp) / "coordinator.log",
                                a.logs / f"coordinator-{i}-{cfg.db}-{cfg.workers}-{cfg.queue}.log")
        run["loadavg_before"], run["loadavg_after"] = load, os.getloadavg()
        results["runs"].append(run)
        print(f"db={cfg.db} | {loadstats.row(run)}", flush=True)
        if run["invalid"]:
            print(f"INVALID run ({cfg.scenario}): " + "; ".join(run["invalid"]), flush=True)
        if a.out:
            a.out.mkdir(parents=True, exist_ok=True)
            (a.out / "results.json").write_text(json.dumps(results, indent=1))
            (a.out / "results.md").write_text(loadstats.table(results))
    sys.exit(1 if any(r["invalid"] for r in results["runs"]) else 0)


if __name__ == "__main__":
    main()
