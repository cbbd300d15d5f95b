#!/usr/bin/env python3
"""Warm job start: a trivial 2-rank job from SubmitJob to SUCCEEDED on workers whose group is warm,
and where the time goes (the job's own created/started/finished stamps and the client's clock).

    python bench/warm_start.py [--jobs 100] [--device cpu|all] [--out FILE.json]

Starts a coordinator (SQLite store, no HTTP side) and two CPU workers (gloo) or one per GPU
(--device all), runs one cold job, then --jobs warm ones, each submitted when the last finished.
The client learns the end from the stream of SubmitAndWatchJob (the submit and its watch in one
call; --two-calls: SubmitJob, then WatchJob; a stream either way: no polling interval in the
figure). Split per job: submit -> started (queue, schedule, dispatch to the daemons), started -> finished (the
daemons, the executors, the group's op and the results), finished -> the client hears it. The run
is invalid (exit 1) unless every warm job reports warm_start and SUCCEEDED.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ringleader_app.client import Client  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402

DONE = (pb.SUCCEEDED, pb.FAILED, pb.CANCELLED)


def _start(tmp: Path, device: str, profile: str = "") -> tuple[list[subprocess.Popen], str]:
    env = dict(os.environ)
    if profile:  # bench/warm_profile/sitecustomize.py: every process stamps each step of a job
        env.update(RL_WARM_PROFILE=str(Path(profile).resolve()),
                   PYTHONPATH=os.pathsep.join([str(ROOT / "bench" / "warm_profile"), str(ROOT), env.get("PYTHONPATH", "")]))
        Path(profile).mkdir(parents=True, exist_ok=True)
    coord = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "127.0.0.1:0",
                              "--http-address", "", "--db", str(tmp / "jobs.db")],
                             stdout=subprocess.PIPE, stderr=open(tmp / "coordinator.log", "wb"), text=True, env=env)
    address = coord.stdout.readline().split()[-1]
    base = [sys.executable, "-m", "ringleader", "--coordinator", address, "worker", "--device", device]
    n = 1 if device == "all" else 2
    workers = [subprocess.Popen(base + ([] if device == "all" else ["--worker-id", f"warm-cpu{k}"]),
                                stdout=subprocess.DEVNULL, stderr=open(tmp / f"worker{k}.log", "wb"), env=env)
               for k in range(n)]
    return [coord, *workers], address


def _run(client: Client, spec: pb.JobSpec, two_calls: bool = False) -> tuple[pb.Job, float, float]:
    """(the finished job, client seconds from submit to the finished event, when that came).
    One call (SubmitAndWatchJob), or `two_calls`: SubmitJob, then WatchJob."""
    t0 = time.time()
    if two_calls:
        job = client.submit(spec)
        for _event in client.watch(job.id):
            pass  # the stream ends when the job does
    else:
        updates = client.submit_and_watch(spec)
        job = next(updates)  # acknowledged
        for _event in updates:
            pass  # the stream ends when the job does
    end = time.time()
    job = client.get(job.id)
    if job.state not in DONE:
        raise SystemExit(f"job {job.id} not finished after its watch ended: {pb.JobState.Name(job.state)}")
    return job, end - t0, t0


def timeline(folder: Path, rows: list[dict]) -> str:
    """Each process's stamps (bench/warm_profile) per job, relative to the job's started_at: the
    median of each tag's first occurrence in the job's window (and its last, where a job stamps
    it more than once, e.g. one per rank's message)."""
    stamps = sorted((float(t), f.stem, tag) for f in folder.glob("*.ts") for tag, t in
                    (line.split() for line in f.read_text().splitlines()))
    first: dict[tuple, list] = {}
    last: dict[tuple, list] = {}
    for r in rows:
        end = r["t0"] + r["total_ms"] / 1e3
        seen: dict[tuple, list] = {}
        for t, pid, tag in stamps:
            if r["t0"] <= t <= end:
                seen.setdefault((pid, tag), []).append((t - r["started_at"]) * 1e3)
        for k, v in seen.items():
            first.setdefault(k, []).append(v[0])
            last.setdefault(k, []).append(v[-1])
    rel = {k: statistics.median(r[k] for r in rows) for k in ("queue_ms", "run_ms", "total_ms")}
    out = [f"ms from the coordinator's started_at (medians of {len(rows)} jobs): submit -{rel['queue_ms']:.3f}, "
           f"finished {rel['run_ms']:.3f}, client end {rel['total_ms'] - rel['queue_ms']:.3f}",
           "c_: coordinator, d_: daemon, e_ and the rest: executor; tag< / tag> enter / leave"]
    for med, pid, tag in sorted((statistics.median(v), pid, tag) for (pid, tag), v in first.items()):
        lst = statistics.median(last[(pid, tag)])
        n = len(first[(pid, tag)])
        out.append(f"{med:9.3f}  {pid:>8}  {tag}" + (f"   (last {lst:.3f})" if lst - med > 0.005 else "")
                   + (f"   [{n} of {len(rows)} jobs]" if n < len(rows) else ""))
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=100)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--world-size", type=int, default=2)
    ap.add_argument("--out", default="")
    ap.add_argument("--two-calls", action="store_true", help="SubmitJob then WatchJob, as a client did before "
                                                              "SubmitAndWatchJob")
    ap.add_argument("--profile", default="", help="a directory: every process stamps each step of each job; "
                                                  "the median timeline is printed and kept there (timeline.txt)")
    a = ap.parse_args()
    trivial = pb.JobSpec(world_size=a.world_size, collective=pb.CollectiveSpec(op="all_reduce", sizes=[8], iters=1,
                                                                               warmup=0))
    with tempfile.TemporaryDirectory() as tmp:
        procs, address = _start(Path(tmp), a.device, a.profile)
        client = Client(address, timeout_s=30)
        try:
            deadline = time.monotonic() + 120
            while sum(w.state == pb.IDLE for w in client.workers()) < a.world_size:
                if time.monotonic() > deadline:
                    raise SystemExit("workers did not come up")
                time.sleep(0.05)
            cold, cold_s, _ = _run(client, trivial, a.two_calls)
            if a.profile:  # the cold job's stamps (imports, rendezvous) are not a warm job's
                time.sleep(0.3)
                for f in Path(a.profile).glob("*.ts"):
                    f.unlink()
            rows = []
            for _ in range(a.jobs):
                job, secs, t0 = _run(client, trivial, a.two_calls)
                if job.state != pb.SUCCEEDED or not job.warm_start:
                    raise SystemExit(f"invalid run: job {job.id} {pb.JobState.Name(job.state)} warm={job.warm_start}")
                rows.append(dict(total_ms=secs * 1e3, queue_ms=(job.started_at - t0) * 1e3,
                                 run_ms=(job.finished_at - job.started_at) * 1e3,
                                 notify_ms=(t0 + secs - job.finished_at) * 1e3, t0=t0, started_at=job.started_at))
        finally:
            client.close()
            for p in procs[::-1]:
                p.terminate()
                p.wait(30)
    if a.profile:
        text = timeline(Path(a.profile), rows)
        (Path(a.profile) / "timeline.txt").write_text(text)
        print(text)
    med = {k: statistics.median(r[k] for r in rows) for k in ("total_ms", "queue_ms", "run_ms", "notify_ms")}
    totals = sorted(r["total_ms"] for r in rows)
    load = open("/proc/loadavg").read().split()[:3]
    calls = "two calls" if a.two_calls else "one call"
    print(f"warm start, {a.jobs} jobs, device {a.device}, {calls}, {os.cpu_count()} CPUs, loadavg {' '.join(load)}: "
          f"cold {cold_s * 1e3:.0f} ms; warm p50 {med['total_ms']:.2f} ms, p90 {totals[int(0.9 * (len(totals) - 1))]:.2f}, "
          f"max {totals[-1]:.2f}; medians: submit->started {med['queue_ms']:.2f}, started->finished "
          f"{med['run_ms']:.2f}, finished->client {med['notify_ms']:.2f} ms")
    if a.out:
        Path(a.out).write_text(json.dumps(dict(cold_ms=cold_s * 1e3, loadavg=load, rows=rows), indent=1))


if __name__ == "__main__":
    main()
