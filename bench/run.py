#!/usr/bin/env python3
"""Benchmark ringleader against plain torch.distributed and nccl-tests on this machine's GPUs.

    python bench/run.py --out DIR [--max-bytes 8G] [--ops all_reduce,gather] [--passes eager,graph,...]

Passes (all by default):
  plain        plain torch.distributed, eager, --iters iterations (bench/plain_torch.py, torchrun)
  plain-graph  the same, the ops captured into a CUDA graph and replayed (sizes <= --graph-max-bytes)
  eager        ringleader, eager, iterations calibrated per size (the default: iters auto)
  eager20      ringleader, eager, --iters iterations, sizes <= 1 MiB (the fixed cost per loop, seen
               against eager's calibrated loops and plain's)
  graph        ringleader, CUDA-graph mode, calibrated (sizes <= --graph-max-bytes)
  sweep        ringleader algo sweeps of all_reduce 8 B - 64 MiB, in graph and in eager mode
Writes DIR/bench.json (every row) and DIR/bench.md (bench/report.py: tables and the issue's goals
checked against bench/nccl_tests_reference.json), plus the coordinator and worker logs.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from report import report  # noqa: E402

from ringleader import spec as specs  # noqa: E402
from ringleader_app.client import Client  # noqa: E402
from ringleader_app.demo import visible_gpu_count  # noqa: E402
from ringleader.jsonview import to_json  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall", "gather", "scatter")
PASSES = ("plain", "plain-graph", "eager", "eager20", "graph", "sweep")
SMALL = 1 << 20  # the eager20 pass stops here


def machine() -> dict:
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip().splitlines()
    return {"gpus": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": platform.python_version(),
            "host": platform.node(), "date": datetime.date.today().isoformat(),
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "")}


def run_plain(n: int, ops, sizes, iters, warmup, out: Path, mode: str = "eager") -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           str(ROOT / "bench" / "plain_torch.py"), ",".join(ops), ",".join(map(str, sizes)), str(iters),
           str(warmup), str(out), mode]
    subprocess.run(cmd, check=True)
    return [dict(r, mode=mode) for r in json.loads(out.read_text())]


class Service:
    """A coordinator process and one worker daemon process per GPU."""

    def __init__(self, tmp: Path) -> None:
        self.coord = subprocess.Popen(
            [sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "127.0.0.1:0",
             "--http-address", "", "--db", str(tmp / "jobs.db")],
            stdout=subprocess.PIPE, stderr=open(tmp / "coordinator.log", "wb"), text=True)
        self.address = self.coord.stdout.readline().split()[-1]
        self.workers = subprocess.Popen(
            [sys.executable, "-m", "ringleader", "--coordinator", self.address, "worker", "--device", "all"],
            stdout=subprocess.DEVNULL, stderr=open(tmp / "workers.log", "wb"))
        self.client = Client(self.address, timeout_s=30)

    def wait_idle(self, n: int, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while sum(w.state == pb.IDLE for w in self.client.workers()) < n:
            if time.monotonic() > deadline:
                raise SystemExit("workers did not come up")
            time.sleep(0.1)

    def run(self, spec: pb.JobSpec) -> tuple[pb.Job, float]:
        t0 = time.perf_counter()
        job = self.client.submit(spec)
        while job.state not in (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED):
            time.sleep(0.002)
            job = self.client.get(job.id)
        return job, time.perf_counter() - t0

    def close(self) -> None:
        self.client.close()
        for p in (self.workers, self.coord):
            p.terminate()
            p.wait(30)


def _rows(job: pb.Job, **extra) -> list[dict]:
    return [dict({f.name: getattr(r, f.name) for f in r.DESCRIPTOR.fields}, **extra) for r in job.results]


def run_ringleader(svc: Service, n: int, ops, sizes, a, passes) -> tuple[list[dict], dict]:
    trivial = pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8], iters=1, warmup=0))
    cold, cold_s = svc.run(trivial)
    warm, warm_s = svc.run(trivial)
    # Warm starts as a distribution (the goal is the p50): the same trivial job again.
    warm_ms = sorted(svc.run(trivial)[1] * 1e3 for _ in range(a.starts))
    # The GPUs' clocks, as plain_torch.py does; not measured.
    svc.run(pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op="all_reduce", sizes=[64 << 20], iters=200,
                                                                  warmup=0)))
    extra = {"starts": {"cold_job_s": cold_s, "cold_warm_start": cold.warm_start,
                        "warm_job_s": warm_s, "warm_warm_start": warm.warm_start, "warm_ms": warm_ms},
             "sweeps": []}
    print(f"trivial job: cold {cold_s * 1e3:.1f} ms, warm {warm_s * 1e3:.1f} ms", flush=True)
    graph_max = specs.parse_size(a.graph_max_bytes)
    plan = {"eager": (sizes, dict()), "eager20": ([s for s in sizes if s <= SMALL], dict(iters=a.iters)),
            "graph": ([s for s in sizes if s <= graph_max], dict(graph=True))}
    rows = []
    for name in (p for p in ("eager", "eager20", "graph") if p in passes):
        chosen, kw = plan[name]
        for op in ops:
            spec = pb.JobSpec(world_size=n, op_timeout_s=600, collective=pb.CollectiveSpec(
                op=op, dtype="float32", sizes=chosen, warmup=a.warmup, **kw))
            job, secs = svc.run(spec)
            print(f"{name} {op}: {pb.JobState.Name(job.state)} in {secs:.1f} s {job.reason}", flush=True)
            if job.state != pb.SUCCEEDED:
                raise SystemExit(f"{name} {op} failed: {job.reason}")
            rows += _rows(job, bench_pass=name)
    if "sweep" in passes:
        for graph in (True, False):
            spec = pb.JobSpec(world_size=n, op_timeout_s=600, algo_sweep=pb.AlgoSweepSpec(
                min_bytes=8, max_bytes=64 << 20, factor=2, graph=graph, warmup=a.warmup))
            job, secs = svc.run(spec)
            print(f"sweep graph={graph}: {pb.JobState.Name(job.state)} in {secs:.1f} s {job.reason}", flush=True)
            if job.state == pb.SUCCEEDED:
                extra["sweeps"].append(to_json(job.algo_sweep))
    return rows, extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="8G")
    ap.add_argument("--graph-max-bytes", default="256M", help="largest size of the graph passes")
    ap.add_argument("--iters", type=int, default=20, help="plain passes and eager20 (nccl-tests' count)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--sizes", default="", help="comma-separated sizes (e.g. 8,1K,16M), instead of min..max")
    ap.add_argument("--starts", type=int, default=0, help="warm trivial jobs timed for the start distribution")
    ap.add_argument("--passes", default=",".join(PASSES), help="comma-separated, of: " + ", ".join(PASSES))
    a = ap.parse_args()
    passes = set(a.passes.split(","))
    if passes - set(PASSES):
        ap.error(f"--passes: unknown {sorted(passes - set(PASSES))}")
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = visible_gpu_count()
    ops = a.ops.split(",")
    sizes = specs.sweep_sizes(specs.parse_size(a.min_bytes), specs.parse_size(a.max_bytes), 2)
    if a.sizes:  # an explicit list (the side-by-side run measures nccl-tests' sizes only)
        sizes = sorted(specs.parse_size(x) for x in a.sizes.split(","))
    graph_sizes = [s for s in sizes if s <= specs.parse_size(a.graph_max_bytes)]
    info = machine()
    plain: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for mode, chosen in (("eager", sizes), ("graph", graph_sizes)):
            if ("plain" if mode == "eager" else "plain-graph") in passes:
                t0 = time.time()
                try:
                    plain += run_plain(n, ops, chosen, a.iters, a.warmup, Path(tmp) / f"plain-{mode}.json", mode)
                except subprocess.CalledProcessError as exc:  # one failed pass leaves the others
                    print(f"plain torch {mode} failed: {exc}", flush=True)
                print(f"plain torch {mode} done in {time.time() - t0:.0f} s", flush=True)
        svc = Service(Path(tmp))
        try:
            svc.wait_idle(n)
            ours, extra = run_ringleader(svc, n, ops, sizes, a, passes)
        finally:
            svc.close()
            for log in ("coordinator.log", "workers.log"):
                (out / log).write_bytes((Path(tmp) / log).read_bytes())
    md = report(plain, ours, extra, n, info)
    (out / "bench.md").write_text(md)
    (out / "bench.json").write_text(json.dumps({"machine": info, "plain": plain, "rows": ours, **extra}, indent=1))
    print(md)


if __name__ == "__main__":
    main()
