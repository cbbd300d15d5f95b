"""`ringleader demo`: the embedded default, end to end on this machine.

A coordinator in this process, worker daemon processes, one all_reduce sweep through the real
gRPC API, the nccl-tests-style table, then a clean exit. The workers (`plan`):

- two or more GPUs: one worker per GPU;
- one GPU: SHARED_RANKS workers sharing it, each with its own NCCL_HOSTID so that NCCL takes them
  for separate hosts and runs its socket transport. The rendezvous, the warm group, the data
  checks and the figures are real, and labelled as what they are: the socket's bandwidth through
  one GPU, not the GPU's own (a 1-rank sweep would print 0.00 GB/s busbw at every size);
- no GPU: two CPU workers with gloo.

Its last line tells the truth about the dashboard: a live link only with `serve` (everything
stays up until Ctrl-C), else how to keep it up.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import grpc

from ringleader_app import table
from ringleader_app.process import CoordinatorConfig, RunningCoordinator
from ringleader.v1 import jobs_pb2 as pb
from ringleader.v1 import jobs_pb2_grpc

WORKERS_READY_TIMEOUT_S = 180
SHARED_RANKS = 4  # ranks on one GPU: enough for all_reduce's ring to show, few enough for its memory
SHARED_MAX_BYTES = 64 << 20  # sockets through one GPU: larger sizes only take longer


@dataclass(frozen=True)
class Plan:
    """What the demo starts: a worker per entry of `workers` (device, extra environment, id or
    "" for the default), and the words that say what the figures measure."""

    workers: list[tuple[str, dict[str, str], str]]
    label: str
    max_bytes: int


# A CUDA device needs its driver's control node (NVIDIA's; ROCm's for torch's HIP build).
GPU_DRIVER_NODES = ("/dev/nvidiactl", "/dev/kfd")


def visible_gpu_count() -> int:
    """CUDA devices visible here, asked in a child so the calling process never touches CUDA;
    0 without asking where no GPU driver's node exists (the child's torch import takes seconds)."""
    if not any(os.path.exists(node) for node in GPU_DRIVER_NODES):
        return 0
    out = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.device_count())"],
                         capture_output=True, text=True, check=False)
    return int(out.stdout.strip() or 0) if out.returncode == 0 else 0


def plan(gpus: int, shared_ranks: int = SHARED_RANKS) -> Plan:
    """The demo's workers for a machine with `gpus` visible GPUs (see the module docstring)."""
    if gpus >= 2:
        return Plan([(f"cuda:{i}", {}, "") for i in range(gpus)], f"{gpus} GPUs, one rank each, NCCL", 1 << 30)
    if gpus == 1:
        # NVLink multicast off: it can take a shared machine's GPUs down.
        workers = [("cuda:0", {"NCCL_HOSTID": f"ringleader-demo-{i}", "NCCL_NVLS_ENABLE": "0"}, f"demo-cuda0-r{i}")
                   for i in range(shared_ranks)]
        return Plan(workers, f"{shared_ranks} ranks sharing one GPU (cuda:0) over NCCL's socket transport: the "
                    "bandwidth is the socket's through one GPU, not NVLink's", SHARED_MAX_BYTES)
    return Plan([("cpu", {}, ""), ("cpu", {}, "")], "2 CPU workers, gloo (no GPU visible)", 64 << 20)


async def run_demo(max_bytes: int | None = None, http_address: str = "127.0.0.1:0", serve: bool = False,
                   shared_ranks: int | None = None) -> int:
    """Run the demo; with `serve`, keep coordinator and workers up after the sweep (until
    Ctrl-C) so the dashboard and the API can be explored."""
    chosen = plan(visible_gpu_count(), shared_ranks or SHARED_RANKS)
    devices = [d for d, _, _ in chosen.workers]
    max_bytes = max_bytes or chosen.max_bytes
    with tempfile.TemporaryDirectory(prefix="ringleader-demo-") as tmp:
        config = CoordinatorConfig(grpc_address="127.0.0.1:0", http_address=http_address,
                                   db=os.path.join(tmp, "jobs.db"))
        async with RunningCoordinator(config) as coord:
            print(f"coordinator: gRPC {coord.grpc_target}")
            print(f"starting {len(devices)} workers: {chosen.label}", flush=True)
            # Their logs go to a file: a pipe nobody reads would fill up and stall a worker.
            workers_log = os.path.join(tmp, "workers.log")
            with open(workers_log, "wb") as logs:
                procs = [subprocess.Popen([sys.executable, "-m", "ringleader", "worker", "--coordinator",
                                           coord.grpc_target, "--device", d, *(["--worker-id", wid] if wid else [])],
                                          env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=logs)
                         for d, env, wid in chosen.workers]
            try:
                code, job_id = await _sweep(coord, len(devices), max_bytes, workers_log, chosen.label)
                if not serve:
                    print("dashboard: run with --serve to keep the dashboard up")
                    return code
                where = f"{coord.http_url}/jobs/{job_id}" if job_id else coord.http_url
                print(f"dashboard: {where or 'off (--http-address is empty)'}  "
                      f"(gRPC {coord.grpc_target}; serving until Ctrl-C)", flush=True)
                await _until_interrupted()
                return code
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:  # waited off the loop, so the coordinator sees them leave
                    try:
                        await asyncio.to_thread(p.wait, 15)
                    except subprocess.TimeoutExpired:
                        p.kill()


async def _until_interrupted() -> None:
    from ringleader.signals import on_stop_signals

    stop = asyncio.Event()
    on_stop_signals(asyncio.get_running_loop(), stop.set)
    await stop.wait()


async def _sweep(coord: RunningCoordinator, n: int, max_bytes: int, workers_log: str, label: str) -> tuple[int, str]:
    """Run the sweep: (exit code, the job's id or "" when none ran)."""
    deadline = time.monotonic() + WORKERS_READY_TIMEOUT_S
    while sum(w.state == pb.IDLE for w in coord.core.list_workers().workers) < n:
        if time.monotonic() > deadline:
            print(f"workers did not register within {WORKERS_READY_TIMEOUT_S} s; their log:", file=sys.stderr)
            with open(workers_log, "rb") as f:
                print(f.read()[-4000:].decode(errors="replace"), file=sys.stderr)
            return 1, ""
        await asyncio.sleep(0.1)
    async with grpc.aio.insecure_channel(coord.grpc_target) as channel:
        stub = jobs_pb2_grpc.JobServiceStub(channel)
        spec = pb.JobSpec(world_size=n, name="demo", collective=pb.CollectiveSpec(
            op="all_reduce", dtype="float32", min_bytes=8, max_bytes=max_bytes, factor=2))
        job = await stub.SubmitJob(pb.SubmitJobRequest(spec=spec))
        print(f"job {job.id}: all_reduce float32 sum, 8 B .. {max_bytes} B on {n} ranks", flush=True)
        async for ev in stub.WatchJob(pb.WatchJobRequest(job_id=job.id)):
            if ev.WhichOneof("event") == "result":
                print(f"  {ev.result.size_bytes:>12} B  {ev.result.busbw_gbps:8.2f} GB/s busbw", flush=True)
        job = await stub.GetJob(pb.GetJobRequest(job_id=job.id))
    print(f"job {job.id} {table.state_name(job.state)} on {job.backend}: {job.reason}")
    print(f"# measured on {label}")
    if job.results:
        print(table.results_table(job.results))
    return (0 if job.state == pb.SUCCEEDED else 1), job.id
