#!/usr/bin/env python3
"""Benchmark ringleader against plain torch.distributed on this machine's GPUs, in one run.

    python bench/run.py --out DIR [--max-bytes 8G] [--ops all_reduce,all_gather]

1. plain torch.distributed (bench/plain_torch.py under torchrun): every op and size;
2. ringleader: a coordinator and `ringleader worker --device all`, one job per op (same sizes,
   float32, out-of-place, same iterations), plus the start latency of a trivial job on a cold
   and on a warm group;
3. writes DIR/bench.json and DIR/bench.md (busbw of both and their ratio per op and size).
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

from ringleader import spec as specs  # noqa: E402
from ringleader.app.client import Client  # noqa: E402
from ringleader.app.demo import visible_gpu_count  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402

OPS = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "sendrecv", "alltoall", "gather", "scatter")


def machine() -> dict:
    import torch

    smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, check=False).stdout.strip().splitlines()
    return {"gpus": smi, "torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())), "python": platform.python_version(),
            "host": platform.node(), "date": datetime.date.today().isoformat(),
            "NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "")}


def run_plain(n: int, ops, sizes, iters, warmup, out: Path) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={n}",
           str(ROOT / "bench" / "plain_torch.py"), ",".join(ops), ",".join(map(str, sizes)), str(iters),
           str(warmup), str(out)]
    subprocess.run(cmd, check=True)
    return json.loads(out.read_text())


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


def run_ringleader(n: int, ops, sizes, iters, warmup, tmp: Path) -> tuple[list[dict], dict]:
    svc = Service(tmp)
    try:
        svc.wait_idle(n)
        trivial = pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8], iters=1, warmup=0))
        cold, cold_s = svc.run(trivial)
        warm, warm_s = svc.run(trivial)
        # The GPUs' clocks, as plain_torch.py does; not measured.
        svc.run(pb.JobSpec(world_size=n, collective=pb.CollectiveSpec(op="all_reduce", sizes=[64 << 20],
                                                                      iters=200, warmup=0)))
        starts = {"cold_job_s": cold_s, "cold_warm_start": cold.warm_start,
                  "warm_job_s": warm_s, "warm_warm_start": warm.warm_start}
        print(f"trivial job: cold {cold_s * 1e3:.1f} ms, warm {warm_s * 1e3:.1f} ms", flush=True)
        rows = []
        for op in ops:
            spec = pb.JobSpec(world_size=n, op_timeout_s=600, collective=pb.CollectiveSpec(
                op=op, dtype="float32", sizes=sizes, iters=iters, warmup=warmup))
            job, secs = svc.run(spec)
            print(f"{op}: {pb.JobState.Name(job.state)} in {secs:.1f} s {job.reason}", flush=True)
            if job.state != pb.SUCCEEDED:
                raise SystemExit(f"{op} failed: {job.reason}")
            rows += [{f.name: getattr(r, f.name) for f in r.DESCRIPTOR.fields} for r in job.results]
        return rows, starts
    finally:
        svc.close()


def report(plain: list[dict], ours: list[dict], n: int, info: dict, starts: dict) -> str:
    by_key = {(r["op"], r["size_bytes"]): r for r in plain}
    lines = [f"# ringleader vs plain torch.distributed, {n} GPUs", "",
             f"Machine: {', '.join(info['gpus'])}; torch {info['torch']} (CUDA {info['cuda']}), NCCL {info['nccl']}, "
             f"Python {info['python']}; NCCL_NVLS_ENABLE={info['NCCL_NVLS_ENABLE']}; {info['date']}.",
             "float32, out-of-place (all_reduce/reduce/broadcast are in place in torch's API, in both columns).", "",
             f"Trivial 8 B all_reduce job, submit to SUCCEEDED through the gRPC API: cold group "
             f"{starts['cold_job_s'] * 1e3:.1f} ms, warm group {starts['warm_job_s'] * 1e3:.1f} ms.", "",
             "| op | size | ringleader time (us) | plain time (us) | ringleader busbw (GB/s) | plain busbw (GB/s) | ratio | wrong |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in ours:
        p = by_key.get((r["op"], r["size_bytes"]))
        if not p:
            continue
        plain_busbw = r["size_bytes"] / p["time_us"] / 1e3 * specs.busbw_factor(r["op"], n)
        ratio = p["time_us"] / r["time_us"]  # = busbw ratio; > 1 means ringleader is faster
        r["plain_time_us"], r["plain_busbw_gbps"], r["ratio"] = p["time_us"], plain_busbw, ratio
        lines.append(f"| {r['op']} | {specs.format_size(r['size_bytes'])} | {r['time_us']:.2f} | {p['time_us']:.2f} | "
                     f"{r['busbw_gbps']:.2f} | {plain_busbw:.2f} | {ratio:.3f} | {r['wrong']} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--ops", default=",".join(OPS))
    ap.add_argument("--min-bytes", default="8")
    ap.add_argument("--max-bytes", default="8G")
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    a = ap.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    n = visible_gpu_count()
    ops = a.ops.split(",")
    sizes = specs.sweep_sizes(specs.parse_size(a.min_bytes), specs.parse_size(a.max_bytes), 2)
    info = machine()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.time()
        plain = run_plain(n, ops, sizes, a.iters, a.warmup, Path(tmp) / "plain.json")
        print(f"plain torch done in {time.time() - t0:.0f} s", flush=True)
        ours, starts = run_ringleader(n, ops, sizes, a.iters, a.warmup, Path(tmp))
        for log in ("coordinator.log", "workers.log"):
            (out / log).write_bytes((Path(tmp) / log).read_bytes())
    md = report(plain, ours, n, info, starts)
    (out / "bench.md").write_text(md)
    (out / "bench.json").write_text(json.dumps({"machine": info, "starts": starts, "rows": ours}, indent=1))
    print(md)


if __name__ == "__main__":
    main()
