"""What one user call costs the coordinator, alone: a coordinator with no workers (its own SQLite
file), then N sequential SubmitJob (each queued: no worker can take it), N GetJob of those jobs and
N ListWorkers. Prints the coordinator's CPU per call (from /proc, so Linux only) and the client's
p50 / p99. Run it from a tree (cwd and PYTHONPATH) to measure that tree's coordinator; the figures
depend on the machine, so compare trees in one sitting.

    PYTHONPATH=. python bench/user_call_cost.py [--n 2000] [--calls submit,get,list,cancel]

`cancel` cancels N queued jobs submitted for it before its timing starts.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import grpc

sys.path.insert(0, os.getcwd())

from bench.loadstats import cpu_seconds, pct  # noqa: E402
from ringleader.v1 import jobs_pb2 as pb  # noqa: E402
from ringleader.v1 import jobs_pb2_grpc as rpc  # noqa: E402


def spec() -> pb.JobSpec:
    return pb.JobSpec(world_size=2, placement=pb.Placement(device_type="cuda"),
                      collective=pb.CollectiveSpec(op="all_reduce", sizes=[1024, 65536], iters=1, warmup=0))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--calls", default="submit,get,list")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    with open(tmp / "coordinator.log", "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "ringleader", "coordinator", "--grpc-address", "127.0.0.1:0",
                                 "--db", str(tmp / "jobs.db")], stdout=subprocess.PIPE, stderr=log, text=True)
    try:
        address = proc.stdout.readline().split()[3].rstrip(",")
        stub = rpc.JobServiceStub(grpc.insecure_channel(address))
        ids = [stub.SubmitJob(pb.SubmitJobRequest(spec=spec(), request_id=uuid.uuid4().hex)).id for _ in range(200)]
        doomed: list[str] = []  # with "cancel": N queued jobs submitted first, each then cancelled
        if "cancel" in a.calls.split(","):
            doomed = [stub.SubmitJob(pb.SubmitJobRequest(spec=spec(), request_id=uuid.uuid4().hex)).id
                      for _ in range(a.n)]
        calls = {"submit": lambda i: stub.SubmitJob(pb.SubmitJobRequest(spec=spec(), request_id=uuid.uuid4().hex)),
                 "get": lambda i: stub.GetJob(pb.GetJobRequest(job_id=ids[i % len(ids)])),
                 "list": lambda i: stub.ListWorkers(pb.ListWorkersRequest()),
                 "cancel": lambda i: stub.CancelJob(pb.CancelJobRequest(job_id=doomed[i], reason="bench"))}
        invalid = []
        for name in a.calls.split(","):
            took, c0 = [], cpu_seconds(proc.pid)
            for i in range(a.n):
                t = time.perf_counter()
                answer = calls[name](i)
                took.append(time.perf_counter() - t)
                if name == "submit" and answer.state != pb.QUEUED:  # the scenario: nothing placed
                    invalid.append(f"job {answer.id} {pb.JobState.Name(answer.state)}")
                if name == "cancel" and answer.state != pb.CANCELLED:
                    invalid.append(f"job {answer.id} {pb.JobState.Name(answer.state)} after its cancel")
            time.sleep(0.3)  # the last call's bookkeeping (a commit) lands before the CPU is read
            cpu, n = cpu_seconds(proc.pid) - c0, len(took)
            took.sort()
            print(f"{name}: coordinator CPU {cpu / n * 1e6:.0f} us/call  p50 {pct(took, 50):.2f} ms  "
                  f"p99 {pct(took, 99):.2f} ms  ({n:,} calls)")
        if invalid:
            sys.exit(f"INVALID: {len(invalid)} submits were not queued (first: {invalid[0]})")
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    main()
